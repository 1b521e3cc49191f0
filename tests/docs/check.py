#!/usr/bin/python3
"""The docs suite's checks (tests/docs/run calls them), one per command.

Each reads README.md and docs/*.md under DOCROOT (the tree, or a copy made to
break it) and prints one line: "PASS docs/<check>" or "FAIL docs/<check>: why".
The exit status is 0 either way; the line is the verdict.

  check.py links DOCROOT TREE            every relative link resolves
  check.py keys DOCROOT REFERENCE        every config key named exists
  check.py metrics DOCROOT SCRAPE        every inferd_* metric named is scraped
  check.py names DOCROOT                 the inferd_* names, one a line

What counts as a name (the rules docs/testing.md states):
- a link: [text](target) or a reference definition "[id]: target", outside
  code; http(s):, mailto: and other schemes are not followed. A target is a
  path relative to the file that names it (looked up in DOCROOT, then in
  TREE, the repository), optionally with #anchor, which must be the GitHub
  slug of a heading of the target (or of the file itself for "#anchor").
- a config key: a code span that opens with "[section] key" (a value may
  follow: `[kafka] delivery = exactly-once`), and each "key = value" line of
  an ```ini block under a lower-case [section]. Keys of [kafka.client],
  [kafka.consumer] and [kafka.producer] pass to librdkafka verbatim: only
  their section is inferd's. A capitalised section ([Service] in a systemd
  drop-in) is not inferd's and is not checked.
- a metric: any inferd_<name> in the text, code included; a histogram's
  _bucket, _sum and _count are its own samples.
"""
import os
import re
import sys

PASSTHROUGH = {"kafka.client", "kafka.consumer", "kafka.producer"}

# Metrics that a real scrape on the CPU engine carries only as their
# "# TYPE" line, with no sample: each must still have that line (so a rename
# is caught), and each has its reason. Keep this list short.
ALLOW_NO_SAMPLE = {
    # Read with cudaMemGetInfo; sampled only on the CUDA engine
    # (src/http/metrics.c, have_gpu). No GPU where this suite runs.
    "inferd_gpu_memory_used_bytes": "CUDA engine only",
    "inferd_gpu_memory_total_bytes": "CUDA engine only",
    "inferd_gpu_arena_bytes": "CUDA engine only",
}


def doc_files(root):
    out = []
    if os.path.isfile(os.path.join(root, "README.md")):
        out.append("README.md")
    d = os.path.join(root, "docs")
    if os.path.isdir(d):
        out += sorted("docs/" + n for n in os.listdir(d) if n.endswith(".md"))
    return out


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


FENCE = re.compile(r"^ {0,3}(```|~~~)")


def split_code(text):
    """(prose, blocks): the text with fenced blocks blanked (line numbers
    kept), and the fenced blocks as (info string, first line number, lines)."""
    prose, blocks, cur = [], [], None
    for i, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if cur is None and m:
            cur = (line.strip()[3:].strip().lower(), i + 1, [], m.group(1))
            prose.append("")
        elif cur is not None and line.strip().startswith(cur[3]):
            blocks.append(cur[:3])
            cur = None
            prose.append("")
        elif cur is not None:
            cur[2].append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def code_spans(prose):
    """(start, end, text) of each code span, its white space folded: a span may
    run over lines but not past a blank one (a paragraph's end), so that one
    stray backtick cannot shift the pairs of the rest of the file."""
    pos = 0
    for para in re.split(r"(\n[ \t]*\n)", prose):
        for m in re.finditer(r"(`+)(.+?)(?<!`)\1(?!`)", para, flags=re.S):
            yield pos + m.start(), pos + m.end(), " ".join(m.group(2).split())
        pos += len(para)


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def slug(heading):
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)     # a link: its text
    t = t.replace("`", "").replace("*", "")
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(text):
    prose, _ = split_code(text)
    seen, out = {}, set()
    for line in prose.split("\n"):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def report(name, bad, note=""):
    if bad:
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        print(f"FAIL docs/{name}: " + "; ".join(bad[:10]) + more)
    else:
        print(f"PASS docs/{name}" + (f" ({note})" if note else ""))


def check_links(root, tree):
    bad, n = [], 0
    cache = {}

    def target_text(rel):
        if rel not in cache:
            for base in (root, tree):
                p = os.path.join(base, rel)
                if os.path.isfile(p):
                    cache[rel] = read(p)
                    break
            else:
                cache[rel] = None
        return cache[rel]

    for f in doc_files(root):
        text = read(os.path.join(root, f))
        prose, _ = split_code(text)
        for start, end, _ in code_spans(prose):     # code is not a link (a link's text may be)
            prose = prose[:start] + re.sub(r"[^\n]", " ", prose[start:end]) + prose[end:]
        found = [(m.start(), m.group(1)) for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)]
        found += [(m.start(), m.group(1)) for m in re.finditer(r"(?m)^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)", prose)]
        found += [(m.start(), m.group(1)) for m in re.finditer(r"<a\s[^>]*href=\"([^\"]+)\"", prose)]
        for pos, target in found:
            where = f"{f}:{line_of(prose, pos)}"
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue                                # http:, https:, mailto:
            n += 1
            path, _, anchor = target.partition("#")
            if path:
                rel = os.path.normpath(os.path.join(os.path.dirname(f), path))
                if rel.startswith(".."):
                    bad.append(f"{where}: {target} leaves the repository")
                    continue
                if not any(os.path.exists(os.path.join(b, rel)) for b in (root, tree)):
                    bad.append(f"{where}: {target}: no such file")
                    continue
            else:
                rel = f
            if anchor:
                t = target_text(rel)
                if t is None:
                    bad.append(f"{where}: {target}: an anchor into a folder")
                elif anchor not in anchors(t):
                    bad.append(f"{where}: {target}: {rel} has no heading whose slug is '{anchor}'")
    if n == 0:
        bad.append("no relative link found: the check would prove nothing")
    report("links", bad, f"{n} relative links")


def reference_keys(path):
    keys = {}
    for m in re.finditer(r"(?m)^\| `\[([a-z0-9_.]+)\]` \| `([a-z0-9_]+)` \|", read(path)):
        keys.setdefault(m.group(1), set()).add(m.group(2))
    return keys


def check_keys(root, ref):
    keys = reference_keys(ref)
    bad, n = [], 0
    if not keys:
        report("config-keys", [f"no key found in {ref}: the config table is not in the form expected"])
        return

    def one(where, sec, key):
        nonlocal n
        n += 1
        if sec in PASSTHROUGH:
            return
        if sec not in keys:
            bad.append(f"{where}: [{sec}] is not a section of the config table")
        elif key is not None and key not in keys[sec]:
            bad.append(f"{where}: [{sec}] {key} is not a key of the config table")

    for f in doc_files(root):
        if f == "docs/config.md":
            continue            # generated from the table itself
        text = read(os.path.join(root, f))
        prose, blocks = split_code(text)
        for start, _, span in code_spans(prose):
            k = re.match(r"^\[([a-z][a-z0-9_.]*)\]\s+([A-Za-z0-9_.]+)", span)
            if k:
                one(f"{f}:{line_of(prose, start)}", k.group(1), k.group(2))
        for info, first, lines in blocks:
            if info.split()[:1] != ["ini"]:
                continue
            sec = None
            for i, line in enumerate(lines):
                s = line.strip()
                if not s or s[0] in ";#":
                    continue
                h = re.match(r"^\[([^\]]+)\]$", s)
                if h:
                    sec = h.group(1)
                    if sec == sec.lower():
                        one(f"{f}:{first + i}", sec, None)
                    continue
                kv = re.match(r"^([A-Za-z0-9_.]+)\s*=", s)
                if kv and sec is not None and sec == sec.lower():
                    one(f"{f}:{first + i}", sec, kv.group(1))
    if n == 0:
        bad.append("no key reference found: the check would prove nothing")
    report("config-keys", bad, f"{n} key references")


METRIC = re.compile(r"(?<![A-Za-z0-9_])inferd_[a-z][a-z0-9_]*")


def named_metrics(root):
    names = {}
    for f in doc_files(root):
        text = read(os.path.join(root, f))
        for m in METRIC.finditer(text):
            names.setdefault(m.group(0), f"{f}:{line_of(text, m.start())}")
    return names


def check_metrics(root, scrape):
    text = read(scrape)
    typed = set(re.findall(r"(?m)^# TYPE (\S+) ", text))
    sampled = set(re.findall(r"(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", text))
    names = named_metrics(root)
    bad = []
    if not sampled:
        bad.append("the scrape holds no sample")
    for name, where in sorted(names.items()):
        if name in sampled or (name in typed and name + "_count" in sampled):
            continue
        if name in ALLOW_NO_SAMPLE:
            if name not in typed:
                bad.append(f"{where}: {name} (allowed without a sample: {ALLOW_NO_SAMPLE[name]}) has no # TYPE line either")
            continue
        bad.append(f"{where}: {name} is not in the scrape")
    if not names:
        bad.append("no inferd_* name found: the check would prove nothing")
    report("metrics", bad, f"{len(names)} names")


def main(argv):
    cmd = argv[1]
    if cmd == "links":
        check_links(argv[2], argv[3])
    elif cmd == "keys":
        check_keys(argv[2], argv[3])
    elif cmd == "metrics":
        check_metrics(argv[2], argv[3])
    elif cmd == "names":
        for n in sorted(named_metrics(argv[2])):
            print(n)
    else:
        sys.exit(f"check.py: unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)

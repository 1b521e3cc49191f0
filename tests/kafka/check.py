#!/usr/bin/python3
"""check: compares what kcat read back from the topics with what went in.

Used by tests/kafka/run. Inputs are kcat dumps, one record per line:
  input:       %p TAB %o TAB %k TAB %S TAB %h
  predictions: %k TAB %h TAB %s
  dlq:         %k TAB %S TAB %h
  timed predictions (swap): %T TAB %k TAB %h TAB %s
  age and trace: input as above; predictions and DLQ as %k TAB %h TAB %s
  labels: predictions, the model id whose predictions must carry labels,
          its labels file (line i = class i)
  embedding: kcat -J's envelopes, each record's value in a file, and
          inferd-run's vectors of the same records
Each subcommand prints one line and exits 0 (holds) or 1 (does not, with why).
It checks records, not the daemon's logs.
"""

import base64
import collections
import json
import math
import re
import struct
import sys


def headers(h):
    """kcat's %h is name=value,name=value; values may hold commas, so only
    the names we know are taken, each up to the next known name."""
    out = {}
    names = [m for m in re.finditer(r'(?:^|,)([a-z][a-z-]*)=', h)]
    for i, m in enumerate(names):
        end = names[i + 1].start() if i + 1 < len(names) else len(h)
        out[m.group(1)] = h[m.end():end]
    return out


def read(path, fields):
    rows = []
    with open(path, encoding='utf-8', errors='replace') as f:
        for line in f:
            line = line.rstrip('\n')
            if not line:
                continue
            parts = line.split('\t', fields - 1)
            if len(parts) != fields:
                continue
            rows.append(parts)
    return rows


def inputs(path):
    out = {}
    for p, o, k, size, h in read(path, 5):
        hd = headers(h)
        out[k] = dict(partition=int(p), offset=int(o), size=int(size), expect=hd.get('inferd-test-expect', 'ok'),
                      ct=hd.get('content-type'), cid=hd.get('correlation-id'))
    return out


def fail(why):
    print(why)
    sys.exit(1)


def cmd_predictions(inp, pred, topic, top_k, allow_dups):
    """Every good input key has exactly one prediction (or at least one when
    allow_dups), with the source headers and a well-formed JSON value."""
    src = inputs(inp)
    good = {k for k, v in src.items() if v['expect'] == 'ok'}
    seen = collections.Counter()
    for k, h, value in read(pred, 3):
        seen[k] += 1
        if k not in good:
            fail(f'prediction for key {k!r}, which was not a good input')
        hd, s = headers(h), src[k]
        if hd.get('inferd-source-topic') != topic:
            fail(f'{k}: inferd-source-topic {hd.get("inferd-source-topic")!r}, expected {topic!r}')
        if hd.get('inferd-source-partition') != str(s['partition']) or hd.get('inferd-source-offset') != str(s['offset']):
            fail(f'{k}: source {hd.get("inferd-source-partition")}/{hd.get("inferd-source-offset")}, '
                 f'expected {s["partition"]}/{s["offset"]}')
        if s['cid'] is not None and hd.get('correlation-id') != s['cid']:
            fail(f'{k}: correlation-id {hd.get("correlation-id")!r}, expected {s["cid"]!r}')
        try:
            j = json.loads(value)
        except ValueError as e:
            fail(f'{k}: value is not JSON ({e}): {value[:80]!r}')
        top = j.get('top')
        if not isinstance(top, list) or len(top) != top_k:
            fail(f'{k}: "top" is not a list of {top_k}: {value[:120]!r}')
        scores = [t['score'] for t in top]
        if scores != sorted(scores, reverse=True) or not all(0 <= x <= 1 for x in scores):
            fail(f'{k}: scores not descending probabilities: {scores}')
        if not all(0 <= t['class'] < 100000 for t in top):
            fail(f'{k}: class out of range')
        for key in ('model', 'backend', 'precision', 'instance', 'latency_ms'):
            if key not in j:
                fail(f'{k}: "{key}" missing')
    missing = sorted(good - set(seen))
    dups = sum(n - 1 for n in seen.values() if n > 1)
    if missing:
        fail(f'{len(missing)} lost: {len(missing)} of {len(good)} good records have no prediction, '
             f'e.g. {missing[:5]}; {dups} duplicate(s)')
    if dups and not allow_dups:
        fail(f'{dups} duplicate prediction(s), e.g. {[k for k, n in seen.items() if n > 1][:5]}')
    print(f'{len(good)} good records, {len(good)} keys predicted, 0 lost, {dups} duplicate(s)')


def cmd_dlq(inp, dlq):
    """Every bad input is in the DLQ once, with its key, its size and the
    inferd-error code the producer expected; no good record is there."""
    src = inputs(inp)
    bad = {k: v for k, v in src.items() if v['expect'] != 'ok'}
    seen = collections.Counter()
    codes = collections.Counter()
    for k, size, h in read(dlq, 3):
        seen[k] += 1
        if k not in bad:
            fail(f'DLQ holds {k!r}, which was a good record')
        hd = headers(h)
        if hd.get('inferd-error') != bad[k]['expect']:
            fail(f'{k}: inferd-error {hd.get("inferd-error")!r}, expected {bad[k]["expect"]!r}')
        if not hd.get('inferd-error-detail'):
            fail(f'{k}: no inferd-error-detail')
        if int(size) != bad[k]['size']:
            fail(f'{k}: DLQ value of {size} bytes, the input had {bad[k]["size"]}')
        codes[hd['inferd-error']] += 1
    missing = sorted(set(bad) - set(seen))
    if missing:
        fail(f'{len(missing)} bad record(s) not in the DLQ, e.g. {missing[:5]}')
    if any(n > 1 for n in seen.values()):
        fail('a bad record is in the DLQ more than once')
    print('DLQ codes: ' + ', '.join(f'{c}={n}' for c, n in sorted(codes.items())))


STAGES = ('queue', 'decode', 'batch_wait', 'engine', 'produce')


def raw_inputs(path):
    """key -> headers of the input dump (%p %o %k %S %h)."""
    return {k: headers(h) for p, o, k, size, h in read(path, 5)}


def cmd_age(inp, pred, dlq, old_prefix, min_age_s, max_age_s, limit):
    """Keys starting with old_prefix (produced with old timestamps) are in the
    DLQ once, with inferd-error expired and their age (min_age_s..max_age_s)
    and the limit in the detail; every other key is predicted once and never
    in the DLQ (future timestamps, young ones)."""
    src = raw_inputs(inp)
    old = {k for k in src if k.startswith(old_prefix)}
    if not old:
        fail(f'no input key starts with {old_prefix!r}')
    dl = collections.Counter()
    for k, h, _ in read(dlq, 3):
        hd = headers(h)
        dl[k] += 1
        if k not in old:
            fail(f'DLQ holds {k!r}, which was not old')
        if hd.get('inferd-error') != 'expired':
            fail(f'{k}: inferd-error {hd.get("inferd-error")!r}, expected expired')
        m = re.search(r'was ([0-9.]+) s old when taken', hd.get('inferd-error-detail', ''))
        if not m or not (min_age_s <= float(m.group(1)) <= max_age_s):
            fail(f'{k}: detail {hd.get("inferd-error-detail")!r} does not give an age in {min_age_s}..{max_age_s} s')
        if f'max_record_age = {limit}' not in hd['inferd-error-detail']:
            fail(f'{k}: detail {hd["inferd-error-detail"]!r} does not name max_record_age = {limit}')
    pr = collections.Counter(k for k, h, v in read(pred, 3))
    if set(dl) != old or any(n != 1 for n in dl.values()):
        fail(f'DLQ keys {sorted(dl.items())}, expected each of {sorted(old)} once')
    if set(pr) & old:
        fail(f'old records predicted: {sorted(set(pr) & old)}')
    young = set(src) - old
    if set(pr) != young or any(n != 1 for n in pr.values()):
        fail(f'predictions {sorted(pr.items())}, expected each of {sorted(young)} once')
    print(f'{len(old)} expired to the DLQ with their age, {len(young)} others predicted once')


def cmd_trace(inp, out, present):
    """Every output record (prediction or DLQ copy: %k %h %s) carries the
    traceparent and tracestate of its input (present), or neither of them
    (absent) while its input had them."""
    src = raw_inputs(inp)
    n = 0
    for k, h, _ in read(out, 3):
        hd, ih = headers(h), src.get(k)
        if ih is None:
            fail(f'output key {k!r} has no input')
        for name in ('traceparent', 'tracestate'):
            if name not in ih:
                fail(f'input {k} has no {name}: produce it with --trace')
            if present == 'present' and hd.get(name) != ih[name]:
                fail(f'{k}: {name} {hd.get(name)!r}, its input had {ih[name]!r}')
            if present == 'absent' and name in hd:
                fail(f'{k}: {name} {hd[name]!r} copied with [service] trace_headers = no')
        n += 1
    if n == 0:
        fail('no output records to look at')
    print(f'{n} output(s): traceparent and tracestate {present}')


def cmd_timing(inp, pred, present, ages):
    """With present: every prediction's inferd-timing header is
    queue=..;decode=..;batch_wait=..;engine=..;produce=.. in ms, each >= 0,
    and its stages after the queue add up to the prediction's latency_ms
    (the time from taken to produced) to within the rounding; each key
    prefix=seconds of ages has a queue of at least that (its Kafka timestamp
    was that old), prefix=-1 a queue of 0 (a timestamp in the future). With
    absent: no prediction has the header."""
    want = dict(a.split('=') for a in ages.split(',') if a) if ages else {}
    n = 0
    for k, h, v in read(pred, 3):
        hd = headers(h)
        n += 1
        if present == 'absent':
            if 'inferd-timing' in hd:
                fail(f'{k}: inferd-timing {hd["inferd-timing"]!r} with [service] timing_header = no')
            continue
        t = hd.get('inferd-timing')
        if t is None:
            fail(f'{k}: no inferd-timing header')
        parts = [p.split('=') for p in t.split(';')]
        if [p[0] for p in parts] != list(STAGES) or any(len(p) != 2 for p in parts):
            fail(f'{k}: inferd-timing {t!r} is not {"=..;".join(STAGES)}=..')
        ms = {p[0]: float(p[1]) for p in parts}
        if any(x < 0 for x in ms.values()):
            fail(f'{k}: a negative stage in {t!r}')
        lat = json.loads(v)['latency_ms']
        after = sum(ms[s] for s in STAGES[1:])
        if abs(after - lat) > 0.006:
            fail(f'{k}: decode+batch_wait+engine+produce = {after:.3f} ms, latency_ms {lat} ({t})')
        for prefix, sec in want.items():
            if k.startswith(prefix):
                if float(sec) < 0 and ms['queue'] != 0:
                    fail(f'{k}: queue {ms["queue"]} ms for a timestamp in the future (want 0)')
                if float(sec) >= 0 and ms['queue'] < float(sec) * 1e3:
                    fail(f'{k}: queue {ms["queue"]} ms, its timestamp was {sec} s old')
    if n == 0:
        fail('no predictions to look at')
    print(f'{n} prediction(s): inferd-timing {present}' + (', stages add up to latency_ms' if present == 'present' else ''))


def cmd_formats(inp, pred):
    """Predictions exist for both raw formats, with and without content-type."""
    src = inputs(inp)
    got = {k for k, _, _ in read(pred, 3)}
    kinds = collections.Counter()
    for k in got:
        s = src[k]
        fmt = {150528: 'rgb8', 602112: 'f32'}.get(s['size'], '?')
        kinds[(fmt, 'header' if s['ct'] else 'sniffed')] += 1
    need = [('rgb8', 'header'), ('rgb8', 'sniffed'), ('f32', 'header'), ('f32', 'sniffed')]
    absent = [n for n in need if not kinds[n]]
    if absent:
        fail(f'no prediction for {absent}; got {dict(kinds)}')
    print(', '.join(f'{f}/{h}={kinds[(f, h)]}' for f, h in need))


def cmd_swap(pred, old, new):
    """A model swap in place under load: in the output's order, every
    prediction of the old model comes before every one of the new (the swap
    is one point in time), each source partition's offsets rise (partition
    order) and switch from old to new exactly once, and nothing carries a
    third id. Prints the gap between the last old and the first new
    prediction (the producer's timestamps): the pause the swap caused."""
    rows = []
    for ts, k, h, value in read(pred, 4):
        hd = headers(h)
        model = json.loads(value).get('model')
        if model not in (old, new):
            fail(f'{k}: model {model!r}, neither the old {old} nor the new {new}')
        rows.append((int(ts), k, int(hd['inferd-source-partition']), int(hd['inferd-source-offset']), model))
    models = [r[4] for r in rows]
    if old not in models or new not in models:
        fail(f'not both models among {len(rows)} predictions: {collections.Counter(models)}')
    last_old = max(i for i, m in enumerate(models) if m == old)
    first_new = models.index(new)
    if last_old > first_new:
        fail(f'an old-model prediction ({rows[last_old][1]}) after a new-model one ({rows[first_new][1]})')
    parts = collections.defaultdict(list)
    for ts, k, p, o, m in rows:
        parts[p].append((o, m, k))
    for p, seq in sorted(parts.items()):
        offs = [o for o, _, _ in seq]
        if offs != sorted(offs) or len(set(offs)) != len(offs):
            fail(f'partition {p}: source offsets out of order: {offs}')
        switches = sum(1 for a, b in zip(seq, seq[1:]) if a[1] != b[1])
        if switches != 1 or seq[0][1] != old:
            fail(f'partition {p}: {switches} model switch(es), first {seq[0][1]}; expected old, then new, once')
    # A batch's predictions are produced together: over 50 ms apart is the next batch.
    gaps = sorted(g for g in (b[0] - a[0] for a, b in zip(rows, rows[1:])) if g > 50) or [0]
    pause = rows[first_new][0] - rows[last_old][0]
    print(f'{len(rows)} predictions, {last_old + 1} old then {len(rows) - first_new} new, one switch in each of '
          f'{len(parts)} partitions; pause {pause} ms between the last old and the first new prediction '
          f'(median gap between batches {gaps[len(gaps) // 2]} ms)')


def cmd_labels(pred, model, labels_path):
    """The predictions of model name classes below its labels file's line
    count, each with its line as "label"; the other models' predictions
    (no labels file) carry none."""
    with open(labels_path, encoding='utf-8') as f:
        labels = f.read().splitlines()
    n_model = n_other = 0
    for k, h, value in read(pred, 3):
        j = json.loads(value)
        top = j.get('top') or []
        if j.get('model') == model:
            n_model += 1
            for t in top:
                c = t.get('class')
                if not isinstance(c, int) or not 0 <= c < len(labels):
                    fail(f'{k}: class {c!r} outside the model\'s {len(labels)} classes')
                if t.get('label') != labels[c]:
                    fail(f'{k}: class {c} label {t.get("label")!r}, expected {labels[c]!r}')
        else:
            n_other += 1
            if any('label' in t for t in top):
                fail(f'{k}: a label on a prediction of {j.get("model")}, which has no labels file')
    if n_model == 0:
        fail(f'no prediction of {model}')
    print(f'{n_model} predictions of {model} with their {len(labels)} labels, {n_other} of another model without')


def cmd_embedding(fmt, kind, normalize, model, dim, envelopes, values_dir, ref_path):
    """Issue 40's outputs with an embedding: envelopes is kcat -J's lines
    (one a record, its headers as a list), values_dir holds each record's
    value as <offset>.value, ref_path inferd-run's --embeddings of the same
    input records in the same order (the inputs' offsets, by key)."""
    dim = int(dim)
    ref = read_f32(ref_path)
    rows = []
    with open(envelopes, encoding='utf-8', errors='replace') as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows or len(ref) != len(rows) * dim:
        fail(f'{len(rows)} outputs, {len(ref) // dim} reference vectors')
    worst = 0.0
    for r in rows:
        key, off, hl = r.get('key'), r.get('offset'), r.get('headers') or []
        h = dict(zip(hl[0::2], hl[1::2]))
        if h.get('inferd-embedding-dim') != str(dim) or h.get('inferd-model') != model:
            fail(f'{key}: inferd-embedding-dim {h.get("inferd-embedding-dim")!r}, inferd-model '
                 f'{h.get("inferd-model")!r}; want {dim}, {model}')
        with open(f'{values_dir}/{off}.value', 'rb') as vf:
            value = vf.read()
        if fmt == 'f32le':
            if len(value) != 4 * dim:
                fail(f'{key}: an f32le value of {len(value)} bytes, want {4 * dim}')
            vec = struct.unpack(f'<{dim}f', value)
            try:
                p = json.loads(h.get('inferd-prediction', ''))
            except ValueError:
                fail(f'{key}: no JSON in inferd-prediction: {h.get("inferd-prediction")!r}'[:200])
            if 'embedding' in p:
                fail(f'{key}: f32le, yet an embedding in the JSON header')
        else:
            p = json.loads(value)
            e = p.get('embedding')
            if fmt == 'base64':
                raw = base64.b64decode(e or '', validate=True)
                if len(raw) != 4 * dim:
                    fail(f'{key}: base64 of {len(raw)} bytes, want {4 * dim}')
                vec = struct.unpack(f'<{dim}f', raw)
            elif not isinstance(e, list) or len(e) != dim:
                fail(f'{key}: embedding is not a list of {dim}: {str(e)[:100]}')
            else:
                vec = e
        if ('top' in p) != (kind == 'both') or p.get('model') != model:
            fail(f'{key}: kind {kind} but top {"in" if "top" in p else "not in"} {json.dumps(p)[:200]}')
        i = int(key.rsplit('-', 1)[1])
        want = ref[i * dim:(i + 1) * dim]
        num = math.sqrt(sum((a - b) ** 2 for a, b in zip(vec, want)))
        den = math.sqrt(sum(b * b for b in want))
        norm = math.sqrt(sum(a * a for a in vec))
        if normalize == 'l2' and abs(norm - 1) > 1e-5:
            fail(f'{key}: l2-normalised, yet its norm is {norm}')
        worst = max(worst, num / den)
    if worst > 1e-5:
        fail(f'embeddings against inferd-run\'s: rel L2 error up to {worst:.2e} (tol 1e-5)')
    print(f'{len(rows)} outputs: {fmt}, kind {kind}, normalize {normalize}, dim {dim}, headers as asked; '
          f'against inferd-run\'s on the same records: rel L2 error up to {worst:.1e}')


def read_f32(path):
    with open(path, 'rb') as f:
        raw = f.read()
    return struct.unpack(f'<{len(raw) // 4}f', raw)


def main():
    cmd = sys.argv[1]
    if cmd == 'predictions':
        cmd_predictions(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), len(sys.argv) > 6)
    elif cmd == 'dlq':
        cmd_dlq(sys.argv[2], sys.argv[3])
    elif cmd == 'swap':
        cmd_swap(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == 'labels':
        cmd_labels(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == 'formats':
        cmd_formats(sys.argv[2], sys.argv[3])
    elif cmd == 'age':
        cmd_age(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), float(sys.argv[7]),
                sys.argv[8])
    elif cmd == 'trace':
        cmd_trace(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == 'embedding':
        cmd_embedding(*sys.argv[2:10])
    elif cmd == 'timing':
        cmd_timing(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else '')
    else:
        fail(f'unknown command {cmd}')


if __name__ == '__main__':
    main()

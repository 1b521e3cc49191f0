#!/usr/bin/python3
"""Checks a /metrics scrape against what kcat read and what `inferd --plan
--json` printed, for tests/metrics/run. Prints one "PASS id" or "FAIL id: why"
line per check; exits 0 either way (the lines are the result).

    check.py counts SCRAPE PREDICTIONS DLQ_CODES      (files; see run)
    check.py plan SCRAPE PLAN_JSON
    check.py info SCRAPE VERSION
    check.py value SCRAPE NAME [LABEL=VALUE...]       prints the value or "none"
    check.py stages SCRAPE
"""
import json
import re
import sys
import time

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(path):
    """{(name, frozenset(labels)): value}"""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip('\n')
            if not line or line.startswith('#'):
                continue
            m = LINE.match(line)
            if not m:
                raise ValueError('unparsable line: %r' % line)
            labels = frozenset(LABEL.findall(m.group(2) or ''))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def get(s, name, **labels):
    return s.get((name, frozenset(labels.items())))


def series(s, name):
    return {dict(k[1]).get('code') or dict(k[1]).get('partition') or '': v for k, v in s.items() if k[0] == name}


def check(tid, ok, why):
    print('PASS %s' % tid if ok else 'FAIL %s: %s' % (tid, why))


def counts(scrape, predictions, dlq_codes):
    s = parse(scrape)
    with open(predictions) as f:
        n_pred = sum(1 for line in f if line.strip())
    with open(dlq_codes) as f:
        codes = [line.strip() for line in f if line.strip()]
    predicted = get(s, 'inferd_records_total', outcome='predicted')
    dead = get(s, 'inferd_records_total', outcome='dead_lettered')
    check('metrics/records-predicted', predicted == n_pred,
          'inferd_records_total{outcome="predicted"} is %s, kcat read %d predictions' % (predicted, n_pred))
    check('metrics/records-dead-lettered', dead == len(codes),
          'inferd_records_total{outcome="dead_lettered"} is %s, kcat read %d DLQ records' % (dead, len(codes)))
    by_code = series(s, 'inferd_dead_letters_total')
    want = {}
    for c in codes:
        want[c] = want.get(c, 0) + 1
    got = {c: v for c, v in by_code.items() if v}
    check('metrics/dead-letters-by-code', got == want and len(want) > 0,
          'inferd_dead_letters_total %s, the DLQ headers say %s' % (got, want))
    batches = get(s, 'inferd_batches_total')
    size_count = get(s, 'inferd_batch_size_count')
    size_sum = get(s, 'inferd_batch_size_sum')
    dur_count = get(s, 'inferd_batch_duration_seconds_count')
    # Batched: every prediction, and the records refused after they took a
    # place in a batch: a non-finite output, a prediction too large to
    # produce (output-too-large), or a JPEG/PNG the decode pool
    # refused (decode-failed or too-large; the same codes are given before
    # batching to records whose bytes are refused at once).
    lo = n_pred + codes.count('non-finite-output') + codes.count('output-too-large')
    hi = lo + codes.count('decode-failed') + codes.count('too-large')
    check('metrics/batches', batches and batches == size_count == dur_count and size_sum is not None
          and lo <= size_sum <= hi,
          'batches_total %s, batch_size count %s sum %s, batch_duration count %s; %d to %d records batched'
          % (batches, size_count, size_sum, dur_count, lo, hi))
    lat = get(s, 'inferd_record_latency_seconds_count')
    inf = get(s, 'inferd_record_latency_seconds_bucket', le='+Inf')
    check('metrics/latency', lat == n_pred and inf == n_pred and get(s, 'inferd_record_latency_seconds_sum') > 0,
          'record_latency count %s, +Inf bucket %s; %d predictions' % (lat, inf, n_pred))
    lag = series(s, 'inferd_consumer_lag_records')
    lag_s = series(s, 'inferd_consumer_lag_seconds')
    check('metrics/lag', sorted(lag) == ['0', '1'] and set(lag.values()) == {0} and set(lag_s.values()) == {0}
          and get(s, 'inferd_assigned_partitions') == 2,
          'lag records %s, seconds %s, assigned %s (want partitions 0 and 1 at 0, caught up)'
          % (lag, lag_s, get(s, 'inferd_assigned_partitions')))
    check('metrics/slots', get(s, 'inferd_slots') == 2 and get(s, 'inferd_slots_busy') == 0
          and get(s, 'inferd_paused') == 0,
          'slots %s busy %s paused %s' % (get(s, 'inferd_slots'), get(s, 'inferd_slots_busy'), get(s, 'inferd_paused')))
    gpu = [k for k in s if k[0].startswith('inferd_gpu_')]
    check('metrics/no-gpu-on-cpu', not gpu, 'the CPU engine exports %s' % gpu)
    now = time.time()
    start = get(s, 'process_start_time_seconds')
    check('metrics/process', start and now - 600 < start <= now and get(s, 'process_resident_memory_bytes') > 1e6
          and get(s, 'process_open_fds') > 3 and get(s, 'process_max_fds') >= get(s, 'process_open_fds')
          and get(s, 'process_cpu_seconds_total') > 0,
          'process_*: start %s (now %.0f), rss %s, fds %s/%s, cpu %s'
          % (start, now, get(s, 'process_resident_memory_bytes'), get(s, 'process_open_fds'),
             get(s, 'process_max_fds'), get(s, 'process_cpu_seconds_total')))


def plan(scrape, plan_json):
    s = parse(scrape)
    with open(plan_json) as f:
        p = json.load(f)
    want = {'weights': p['weights_bytes'], 'activations': p['activation_bytes'], 'workspace': p['workspace_bytes'],
            'staging': p['staging_bytes'], 'context': p['context_bytes'], 'graphs': p['graph_bytes'],
            'arena_kept': p['arena_kept_bytes'], 'pinned_host': p['pinned_host_bytes'],
            'kafka_queue': p['kafka_queue_bytes'], 'cache': p['cache_bytes']}
    got = {dict(k[1])['term']: v for k, v in s.items() if k[0] == 'inferd_plan_bytes'}
    check('metrics/plan-terms', got == want, 'inferd_plan_bytes %s, inferd --plan --json %s' % (got, want))
    # pinned_host, kafka_queue and cache are host memory, outside the device total.
    device = sum(v for t, v in got.items() if t not in ('pinned_host', 'kafka_queue', 'cache'))
    check('metrics/plan-total', device == p['total_bytes'],
          'the device terms sum to %s, the plan\'s total is %s' % (device, p['total_bytes']))
    check('metrics/plan-budget', get(s, 'inferd_plan_budget_bytes') == p['budget_bytes']
          and get(s, 'inferd_plan_max_batch') == p['max_batch'],
          'budget %s max_batch %s; the plan: %s %s' % (get(s, 'inferd_plan_budget_bytes'),
                                                       get(s, 'inferd_plan_max_batch'), p['budget_bytes'],
                                                       p['max_batch']))


def info(scrape, version):
    s = parse(scrape)
    b = [dict(k[1]) for k, v in s.items() if k[0] == 'inferd_build_info' and v == 1]
    check('metrics/build-info', len(b) == 1 and b[0]['version'] == version and b[0]['backend'] == 'cpu'
          and b[0]['precision'] == 'fp32' and re.match(r'resnet50 sha256:[0-9a-f]{12}$', b[0]['model']),
          'inferd_build_info %s (version %s, the CPU engine)' % (b, version))
    states = {dict(k[1])['state']: v for k, v in s.items() if k[0] == 'inferd_state'}
    check('metrics/state', states == {'starting': 0, 'ready': 1, 'reloading': 0, 'draining': 0},
          'inferd_state %s' % states)


STAGES = ('queue', 'decode', 'batch_wait', 'engine', 'produce')


def stages(scrape):
    """inferd_stage_duration_seconds: one observation per prediction and
    stage, and a record's stages add up to its inferd_record_latency_seconds,
    so the stages' sums add up to the latency's sum, to within the finest
    bucket (50 us) per record. Every stage took some time (the run has JPEG
    records: decode too), so leaving one out of the split breaks the sum."""
    s = parse(scrape)
    n = get(s, 'inferd_record_latency_seconds_count')
    lat = get(s, 'inferd_record_latency_seconds_sum')
    counts = {st: get(s, 'inferd_stage_duration_seconds_count', stage=st) for st in STAGES}
    sums = {st: get(s, 'inferd_stage_duration_seconds_sum', stage=st) for st in STAGES}
    infs = {st: get(s, 'inferd_stage_duration_seconds_bucket', stage=st, le='+Inf') for st in STAGES}
    check('metrics/stage-counts', n and all(counts[st] == n and infs[st] == n for st in STAGES),
          'stage counts %s, +Inf buckets %s; record_latency count %s' % (counts, infs, n))
    ok = n and lat and all(sums[st] is not None and sums[st] > 0 for st in STAGES)
    total = sum(v for v in sums.values() if v is not None)
    tol = (n or 0) * 50e-6
    print('   stages: ' + ', '.join('%s %.4f s' % (st, sums[st] or 0) for st in STAGES)
          + '; sum %.6f s, record latency %.6f s over %s records' % (total, lat or 0, n))
    check('metrics/stages-sum', ok and abs(total - lat) <= tol,
          'the stages sum to %.6f s, the record latency to %s s (tolerance %.6f s); a stage at 0: %s'
          % (total, lat, tol, [st for st in STAGES if not sums[st]]))


def value(scrape, name, *labels):
    s = parse(scrape)
    v = get(s, name, **dict(l.split('=', 1) for l in labels))
    print('none' if v is None else '%g' % v)


if __name__ == '__main__':
    {'counts': counts, 'plan': plan, 'info': info, 'value': value, 'stages': stages}[sys.argv[1]](*sys.argv[2:])

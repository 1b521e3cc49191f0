// tools/k8s-validate/guardrails.mjs DIR: the post-mortem's guardrails in
// deploy/kubernetes, checked by value (tests/deploy). The schemas say a
// manifest is well formed; this says it still holds what docs/kubernetes.md promises:
//   limits      each Deployment's container has requests = limits for cpu,
//               memory and nvidia.com/gpu (1), and its memory limit is its
//               ConfigMap's [memory] host_budget + 1GiB
//   drain       terminationGracePeriodSeconds > [drain] timeout_s, no preStop
//   partitions  replicas and the ScaledObject's maxReplicaCount <= the
//               inferd.io/input-partitions annotation, the same on both
//   decode      [decode] threads < the cpu limit
//   probes      startup, readiness and liveness probes on the port the
//               ConfigMap's [metrics] probes_listen names (else listen's)
//   networkpolicy  a NetworkPolicy selects its pods and admits ingress only
//               on those two ports, each rule from named peers
//   user        runAsNonRoot, runAsUser = the image's UID (10001),
//               readOnlyRootFilesystem, no privilege escalation
//   config      the ConfigMap mounted at /etc/inferd, the Secret read-only
//   pdb, limitrange, scaledobject  one PDB and ScaledObject per colour, the
//               LimitRange gives a default memory limit
// Prints "PASS deploy/guardrails/<what>" or "FAIL ...: why" (tests/run).
import fs from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';

const dir = process.argv[2];
const objs = [];
for (const f of fs.readdirSync(dir).filter(f => f.endsWith('.yaml') && f !== 'kustomization.yaml').sort()) {
        for (const d of parseAllDocuments(fs.readFileSync(path.join(dir, f), 'utf8'))) {
                const o = d.toJS();
                if (o) objs.push({ file: f, ...o });
        }
}
const of = kind => objs.filter(o => o.kind === kind);
let failed = 0;
function check(what, problems) {
        if (problems.length) {
                failed++;
                console.log(`FAIL deploy/guardrails/${what}: ${problems.join('; ')}`);
        } else {
                console.log(`PASS deploy/guardrails/${what}`);
        }
}

// SIZE as the daemon reads it (units_parse_size: B, KiB, MiB, GiB) and as
// Kubernetes writes memory quantities (Ki, Mi, Gi).
function bytes(s) {
        const m = String(s).trim().match(/^(\d+)\s*(B|KiB|MiB|GiB|TiB|Ki|Mi|Gi|Ti)?$/);
        if (!m) return NaN;
        const k = { undefined: 1, B: 1, KiB: 1024, Ki: 1024, MiB: 1024 ** 2, Mi: 1024 ** 2, GiB: 1024 ** 3, Gi: 1024 ** 3, TiB: 1024 ** 4, Ti: 1024 ** 4 };
        return Number(m[1]) * k[m[2]];
}
// The INI's [section] key, or undefined.
function ini(text, section, key) {
        let cur = '';
        for (const raw of text.split('\n')) {
                const l = raw.replace(/[;#].*$/, '').trim();
                const s = l.match(/^\[(.+)\]$/);
                if (s) { cur = s[1]; continue; }
                const kv = l.match(/^([^=]+?)\s*=\s*(.*)$/);
                if (kv && cur === section && kv[1] === key) return kv[2];
        }
        return undefined;
}

const colours = of('Deployment').map(d => d.metadata.labels?.['inferd.io/colour']);
check('colours', colours.sort().join(',') === 'blue,green' ? [] : [`Deployments for ${colours.join(',')}, not blue and green`]);

for (const dep of of('Deployment')) {
        const c = dep.metadata.labels['inferd.io/colour'];
        const pod = dep.spec.template.spec;
        const ctr = pod.containers.find(x => x.name === 'inferd');
        const cmName = pod.volumes?.find(v => v.configMap)?.configMap?.name;
        const cm = of('ConfigMap').find(m => m.metadata.name === cmName);
        const text = cm?.data?.['inferd.ini'] ?? '';
        const p = [];
        if (!ctr) { check(`${c}/container`, ['no container named inferd']); continue; }
        // limits
        const rq = ctr.resources?.requests ?? {}, lm = ctr.resources?.limits ?? {};
        for (const r of ['cpu', 'memory', 'nvidia.com/gpu'])
                if (lm[r] === undefined || String(rq[r]) !== String(lm[r])) p.push(`${r}: request ${rq[r]} and limit ${lm[r]} must both be set and equal`);
        if (String(lm['nvidia.com/gpu']) !== '1') p.push(`nvidia.com/gpu limit ${lm['nvidia.com/gpu']}, not 1`);
        const hb = bytes(ini(text, 'memory', 'host_budget') ?? '2GiB');
        if (bytes(lm.memory) !== hb + 1024 ** 3) p.push(`memory limit ${lm.memory} is not [memory] host_budget (${hb} bytes) + 1GiB`);
        check(`${c}/limits`, p);
        // drain
        const drain = Number(ini(text, 'drain', 'timeout_s') ?? 30);
        const grace = pod.terminationGracePeriodSeconds;
        const q = [];
        if (!(grace > drain)) q.push(`terminationGracePeriodSeconds ${grace} is not above [drain] timeout_s ${drain}`);
        if (ctr.lifecycle?.preStop) q.push('a preStop hook: SIGTERM itself drains');
        check(`${c}/drain`, q);
        // partitions
        const parts = Number(dep.metadata.annotations?.['inferd.io/input-partitions']);
        const so = of('ScaledObject').find(s => s.spec.scaleTargetRef.name === dep.metadata.name);
        const r = [];
        if (!(parts > 0)) r.push('no inferd.io/input-partitions annotation');
        if (!(dep.spec.replicas <= parts)) r.push(`replicas ${dep.spec.replicas} > ${parts} partitions`);
        if (!so) r.push('no ScaledObject targets it');
        else {
                if (!(so.spec.maxReplicaCount <= parts)) r.push(`ScaledObject maxReplicaCount ${so.spec.maxReplicaCount} > ${parts} partitions`);
                if (Number(so.metadata.annotations?.['inferd.io/input-partitions']) !== parts) r.push('the ScaledObject names another partition count');
                const t = so.spec.triggers?.find(x => x.type === 'kafka');
                if (!t) r.push('the ScaledObject has no kafka trigger');
                else {
                        if (t.metadata.topic !== ini(text, 'kafka', 'input_topic')) r.push(`the trigger's topic ${t.metadata.topic} is not [kafka] input_topic`);
                        if (t.metadata.consumerGroup !== ini(text, 'kafka', 'group_id')) r.push(`the trigger's group ${t.metadata.consumerGroup} is not [kafka] group_id`);
                        if (t.metadata.allowIdleConsumers !== 'false') r.push('allowIdleConsumers is not "false"');
                }
        }
        check(`${c}/partitions`, r);
        // decode
        const threads = Number(ini(text, 'decode', 'threads'));
        check(`${c}/decode`, threads >= 1 && threads < Number(lm.cpu) ? [] : [`[decode] threads ${threads} is not set below the cpu limit ${lm.cpu} (0 would count the node's cores)`]);
        // probes
        const listen = ini(text, 'metrics', 'listen') ?? '';
        const lport = Number(listen.split(':').pop());
        const mport = ctr.ports?.find(x => x.name === 'metrics')?.containerPort;
        const s = [];
        if (mport !== lport) s.push(`the metrics port ${mport} is not [metrics] listen's ${lport}`);
        if (!listen.startsWith('0.0.0.0:') && !listen.startsWith('[::]:')) s.push(`[metrics] listen ${listen} is not every address: the kubelet could not probe it`);
        // With [metrics] probes_listen, the probes go to its port (named
        // "probes"), whose connection slots no scraper or attacker shares.
        const plisten = ini(text, 'metrics', 'probes_listen') ?? '';
        const pport = plisten ? Number(plisten.split(':').pop()) : null;
        const cpport = ctr.ports?.find(x => x.name === 'probes')?.containerPort;
        if (plisten && cpport !== pport) s.push(`the probes port ${cpport} is not [metrics] probes_listen's ${pport}`);
        if (plisten && !plisten.startsWith('0.0.0.0:') && !plisten.startsWith('[::]:')) s.push(`[metrics] probes_listen ${plisten} is not every address: the kubelet could not probe it`);
        for (const pr of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
                const o = ctr[pr];
                const port = o?.httpGet?.port ?? o?.tcpSocket?.port;
                if (!o) s.push(`no ${pr}`);
                else if (plisten && port !== 'probes' && port !== pport) s.push(`${pr} not on the probes port ([metrics] probes_listen)`);
                else if (!plisten && port !== 'metrics' && port !== lport) s.push(`${pr} not on the metrics port`);
        }
        if (ctr.startupProbe?.httpGet?.path !== '/healthz' && ctr.startupProbe?.httpGet?.path !== '/readyz') s.push('the startupProbe does not wait for /healthz or /readyz');
        if (ctr.readinessProbe?.httpGet?.path !== '/readyz') s.push('the readinessProbe is not /readyz (partitions assigned, engine warm, Kafka answering)');
        if (ctr.livenessProbe?.httpGet?.path !== '/livez') s.push('the livenessProbe is not /livez: /healthz and /readyz answer 503 while the daemon drains or swaps a model, which must not restart it');
        check(`${c}/probes`, s);
        // user
        const u = [];
        const sc = { ...pod.securityContext, ...ctr.securityContext };
        if (sc.runAsNonRoot !== true) u.push('runAsNonRoot is not true');
        if (sc.runAsUser !== 10001) u.push(`runAsUser ${sc.runAsUser}, not the image's 10001`);
        if (ctr.securityContext?.readOnlyRootFilesystem !== true) u.push('readOnlyRootFilesystem is not true');
        if (ctr.securityContext?.allowPrivilegeEscalation !== false) u.push('allowPrivilegeEscalation is not false');
        check(`${c}/user`, u);
        // config
        const v = [];
        if (!cm) v.push(`no ConfigMap ${cmName}`);
        else if (ini(text, 'service', 'instance') !== c) v.push(`the ConfigMap's [service] instance is ${ini(text, 'service', 'instance')}, not ${c}`);
        const mounts = Object.fromEntries((ctr.volumeMounts ?? []).map(m => [m.name, m]));
        const cv = pod.volumes.find(x => x.configMap);
        if (mounts[cv?.name]?.mountPath !== '/etc/inferd') v.push('the ConfigMap is not mounted at /etc/inferd');
        const sv = pod.volumes.find(x => x.secret);
        if (!sv || mounts[sv.name]?.readOnly !== true) v.push('no Secret mounted read-only as files');
        if ((ctr.env ?? []).some(e => e.valueFrom?.secretKeyRef)) v.push('a secret in an environment variable');
        check(`${c}/config`, v);
        // pdb
        const pdb = of('PodDisruptionBudget').find(b => b.spec.selector?.matchLabels?.['inferd.io/colour'] === c);
        check(`${c}/pdb`, pdb ? [] : ['no PodDisruptionBudget selects it']);
        // networkpolicy: ingress to the pod only on the metrics and probes
        // ports, each from a peer named (Prometheus, the kubelet's nodes)
        const n = [];
        const podLabels = dep.spec.template.metadata.labels ?? {};
        const np = of('NetworkPolicy').find(x => Object.entries(x.spec.podSelector?.matchLabels ?? {}).every(([k, val]) => podLabels[k] === val));
        if (!np) n.push('no NetworkPolicy selects its pods: anyone on the pod network reaches the endpoint');
        else {
                if (!(np.spec.policyTypes ?? []).includes('Ingress')) n.push('the NetworkPolicy does not restrict Ingress');
                const allowed = new Set([lport, pport].filter(x => x));
                for (const rule of np.spec.ingress ?? []) {
                        if (!rule.from?.length) n.push('an ingress rule admits every source');
                        if (!rule.ports?.length) n.push('an ingress rule admits every port');
                        for (const p of rule.ports ?? []) if (!allowed.has(p.port)) n.push(`an ingress rule admits port ${p.port}, not the metrics or probes port`);
                }
        }
        check(`${c}/networkpolicy`, n);
}
const lr = of('LimitRange')[0]?.spec?.limits?.find(l => l.type === 'Container');
check('limitrange', lr?.default?.memory && lr?.max?.memory ? [] : ['no LimitRange with a default and a max container memory']);
process.exit(failed ? 1 : 0);

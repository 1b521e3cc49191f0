// tools/k8s-validate/validate.mjs: checks Kubernetes manifests and a Grafana
// dashboard against their published schemas, for tests/deploy.
//
//   node validate.mjs k8s FILE.yaml...    every document of every file
//   node validate.mjs grafana FILE.json   one classic (schemaVersion 3x) dashboard
//
// Each Kubernetes document is checked twice, against the schemas the npm
// packages kubernetes-models, @kubernetes-models/prometheus-operator and
// @kubernetes-models/keda carry (generated from Kubernetes' OpenAPI document
// and from the CRDs' own OpenAPI schemas):
//   1. by the package's own validator (ajv, compiled from the schema): types,
//      required fields, enums, formats;
//   2. by TypeScript's checker against the package's types, generated from the
//      same schema: an object literal with a field the type does not have (a
//      misspelling) is an error there, which the schema alone allows, since
//      Kubernetes' OpenAPI objects do not forbid unknown fields (kubeconform
//      -strict adds the same rule).
// The dashboard has only the second check: @grafana/schema carries Grafana's
// dashboard schema as TypeScript types (the Dashboard and Panel interfaces).
// A kustomization.yaml is not an API object; tests/deploy checks its list.
//
// Prints "ok FILE#N KIND/NAME" or "error FILE#N KIND/NAME: WHY" per document,
// and exits 1 when any is an error. It is deliberately not a general tool:
// only the kinds deploy/ uses are mapped (an unknown kind is an error).
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { parseAllDocuments } from 'yaml';

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(import.meta.url);

// apiVersion -> the module folder that holds its kinds.
function moduleOf(apiVersion) {
        if (apiVersion === 'v1') return 'kubernetes-models/v1';
        const [group, version] = apiVersion.split('/');
        if (group === 'monitoring.coreos.com') return `@kubernetes-models/prometheus-operator/${group}/${version}`;
        if (group === 'keda.sh') return `@kubernetes-models/keda/${group}/${version}`;
        if (['apps', 'policy', 'autoscaling', 'networking.k8s.io'].includes(group)) return `kubernetes-models/${group}/${version}`;
        return null;
}

function tscheck(units) {
        // units: [{ label, imports: 'import type ...', type, value }]
        // Beside node_modules, so that the imports resolve as they would for a
        // package of this folder.
        const dir = fs.mkdtempSync(path.join(here, '.check-'));
        try {
                let src = '';
                const lines = []; // line number -> label
                const imports = new Set(units.map(u => u.imports));
                for (const i of imports) src += i + '\n';
                // Grafana's types spell enumerations as TypeScript enums, to
                // which a JSON string is not assignable: Json<T> is T with
                // each enum replaced by the union of its string values, and
                // everything else (excess-property checks included) as is.
                src += 'type Json<T> = T extends string ? `${T}` : T extends (infer U)[] ? Json<U>[] : ' +
                        'T extends object ? { [K in keyof T]: Json<T[K]> } : T;\n';
                units.forEach((u, n) => {
                        const json = JSON.stringify(u.value, null, 1);
                        const start = src.split('\n').length;
                        src += `export const v${n}: ${u.type} = ${json};\n`;
                        const end = src.split('\n').length;
                        for (let l = start; l < end; l++) lines[l] = u.label;
                });
                fs.writeFileSync(path.join(dir, 'check.ts'), src);
                fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
                        compilerOptions: {
                                strict: true, noEmit: true, skipLibCheck: true, module: 'esnext',
                                moduleResolution: 'bundler', target: 'es2022', types: [],
                        },
                        files: [path.join(dir, 'check.ts')],
                }));
                const tsc = path.join(here, 'node_modules', 'typescript', 'bin', 'tsc');
                let out = '';
                try {
                        execFileSync(process.execPath, [tsc, '-p', dir, '--pretty', 'false'], { encoding: 'utf8' });
                } catch (e) {
                        out = (e.stdout || '') + (e.stderr || '');
                }
                const errs = new Map();
                for (const line of out.split('\n')) {
                        const m = line.match(/check\.ts\((\d+),\d+\): error (TS\d+: .*)/);
                        if (!m) continue;
                        const label = lines[Number(m[1])] || 'check.ts';
                        if (!errs.has(label)) errs.set(label, []);
                        errs.get(label).push(m[2]);
                }
                if (out && errs.size === 0)
                        errs.set('tsc', [out.trim().split('\n').slice(0, 5).join(' ')]);
                return errs;
        } finally {
                fs.rmSync(dir, { recursive: true, force: true });
        }
}

async function k8s(files) {
        const results = []; // { label, err }
        const units = [];
        for (const file of files) {
                const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'));
                let n = 0;
                for (const d of docs) {
                        n++;
                        if (d.errors.length) {
                                results.push({ label: `${file}#${n}`, err: `YAML: ${d.errors[0].message}` });
                                continue;
                        }
                        const obj = d.toJS();
                        if (obj === null || obj === undefined) continue;
                        const label = `${file}#${n} ${obj.kind}/${obj.metadata?.name}`;
                        const mod = typeof obj.apiVersion === 'string' ? moduleOf(obj.apiVersion) : null;
                        if (!mod || typeof obj.kind !== 'string') {
                                results.push({ label, err: `no schema known for apiVersion ${obj.apiVersion} kind ${obj.kind}` });
                                continue;
                        }
                        let Cls;
                        try {
                                Cls = (await import(`${mod}/${obj.kind}`))[obj.kind];
                        } catch {
                                Cls = undefined;
                        }
                        if (!Cls) {
                                results.push({ label, err: `no schema for kind ${obj.kind} in ${mod}` });
                                continue;
                        }
                        let err = null;
                        try {
                                new Cls(obj).validate();
                        } catch (e) {
                                err = `schema: ${e.message.split('\n').slice(0, 4).join('; ')}`;
                        }
                        results.push({ label, err });
                        units.push({
                                label, value: obj, type: `I${obj.kind}${n}${units.length}`,
                                imports: `import type { I${obj.kind} as I${obj.kind}${n}${units.length} } from "${mod}/${obj.kind}";`,
                        });
                }
        }
        const terrs = tscheck(units);
        for (const r of results) {
                if (terrs.has(r.label)) {
                        const t = `types: ${terrs.get(r.label).join('; ')}`;
                        r.err = r.err ? `${r.err}; ${t}` : t;
                        terrs.delete(r.label);
                }
        }
        for (const [label, e] of terrs) results.push({ label, err: e.join('; ') });
        return results;
}

function grafana(file) {
        let obj;
        try {
                obj = JSON.parse(fs.readFileSync(file, 'utf8'));
        } catch (e) {
                return [{ label: file, err: `JSON: ${e.message}` }];
        }
        const label = `${file}#1 Dashboard/${obj.uid}`;
        // Every panel is checked as a Panel (or a RowPanel, for a row), one
        // literal each, so that a field misspelled in one panel is not
        // accepted because another member of the union has it.
        const units = [{ label, value: { ...obj, panels: [] }, type: 'Json<Dashboard>', imports: 'import type { Dashboard, Panel, RowPanel } from "@grafana/schema";' }];
        for (const p of obj.panels || []) {
                units.push({
                        label: `${label} panel "${p.title}"`, value: p, type: p.type === 'row' ? 'Json<RowPanel>' : 'Json<Panel>',
                        imports: 'import type { Dashboard, Panel, RowPanel } from "@grafana/schema";',
                });
        }
        const terrs = tscheck(units);
        const results = units.map(u => ({ label: u.label, err: terrs.has(u.label) ? `types: ${terrs.get(u.label).join('; ')}` : null }));
        if (terrs.has('tsc')) results.push({ label: 'tsc', err: terrs.get('tsc').join('; ') });
        return results;
}

const [mode, ...files] = process.argv.slice(2);
if (!['k8s', 'grafana'].includes(mode) || files.length === 0) {
        console.error('usage: node validate.mjs k8s FILE.yaml... | grafana FILE.json');
        process.exit(2);
}
for (const f of files) {
        if (!fs.existsSync(f)) {
                console.error(`validate: ${f}: no such file`);
                process.exit(2);
        }
}
void require;
const results = mode === 'k8s' ? await k8s(files) : grafana(files[0]);
let bad = 0;
for (const r of results) {
        if (r.err) {
                bad++;
                console.log(`error ${r.label}: ${r.err}`);
        } else {
                console.log(`ok ${r.label}`);
        }
}
process.exit(bad ? 1 : 0);

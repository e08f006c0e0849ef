// Validates deploy/kubernetes against the published Kubernetes schemas (kubernetes-models:
// the OpenAPI schemas of Kubernetes as JSON schemas, checked with ajv), then what a schema
// cannot say: every ConfigMap and Secret a workload names is in the manifests with the keys
// it uses, every Service selects a workload's pods, every container's probes name a port it
// declares, b3osd's command names the config file its volume mounts, and the router runs
// without privilege. A broken copy of a manifest must fail (the validator can fail).
//
// Usage: node tests/kubernetes/validate.mjs [DIR]   (default deploy/kubernetes)
// Prints PASS/FAIL lines and the counts; exits 1 on a FAIL.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = process.argv[2] ?? path.join(here, "..", "..", "deploy", "kubernetes");
let passed = 0, failed = 0;
const pass = (n) => { passed++; console.log(`PASS ${n}`); };
const fail = (n, why) => { failed++; console.log(`FAIL ${n}: ${why}`); };
const check = (n, ok, why) => (ok ? pass(n) : fail(n, why));

// The model class of a document: kubernetes-models/<group>/<version>/<Kind>.
async function modelOf(doc) {
  const [group, version] = doc.apiVersion.includes("/") ? doc.apiVersion.split("/") : ["", doc.apiVersion];
  const mod = group ? `kubernetes-models/${group}/${version}/${doc.kind}` : `kubernetes-models/${version}/${doc.kind}`;
  return (await import(mod))[doc.kind];
}

async function validate(doc) {
  const Model = await modelOf(doc);
  new Model(doc).validate();  // throws with the schema's words
}

const docs = [];
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  if (f === "kustomization.yaml") continue;
  for (const d of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, f), "utf8"))) {
    if (d.errors.length) { fail(`yaml.${f}`, d.errors[0].message); continue; }
    const doc = d.toJS();
    if (doc) docs.push({ file: f, doc });
  }
}

for (const { file, doc } of docs) {
  const name = `schema.${doc.kind}.${doc.metadata?.name}`;
  try {
    await validate(doc);
    pass(name);
  } catch (e) {
    fail(name, `${file}: ${String(e.message).slice(0, 300)}`);
  }
}

// The kustomization lists every manifest (secret.yaml is the user's copy of the example).
const kust = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
const files = new Set(docs.map((d) => d.file));
const listed = new Set(kust.resources);
check("kustomization.lists_all", [...files].every((f) => listed.has(f === "secret.example.yaml" ? "secret.yaml" : f)),
  `files ${[...files]} against resources ${[...listed]}`);

const byKind = (k) => docs.filter((d) => d.doc.kind === k).map((d) => d.doc);
const workloads = [...byKind("Deployment"), ...byKind("DaemonSet"), ...byKind("StatefulSet")];
const configMaps = new Map(byKind("ConfigMap").map((c) => [c.metadata.name, c]));
const secrets = new Map(byKind("Secret").map((s) => [s.metadata.name, s]));

for (const w of workloads) {
  const spec = w.spec.template.spec;
  const id = `${w.kind}.${w.metadata.name}`;
  // Selectors match the pods' labels.
  const labels = w.spec.template.metadata.labels ?? {};
  check(`${id}.selector`, Object.entries(w.spec.selector.matchLabels).every(([k, v]) => labels[k] === v), "selector does not match the pod labels");
  for (const v of spec.volumes ?? []) {
    if (v.configMap) check(`${id}.volume.${v.name}`, configMaps.has(v.configMap.name), `no ConfigMap ${v.configMap.name}`);
    if (v.secret) {
      check(`${id}.volume.${v.name}`, secrets.has(v.secret.secretName), `no Secret ${v.secret.secretName}`);
      check(`${id}.volume.${v.name}.private`, (v.secret.defaultMode ?? 0o644) <= 0o400,
        "a secret volume must be 0400: b3osd refuses a cluster secret others can read");
    }
  }
  for (const c of [...(spec.containers ?? []), ...(spec.initContainers ?? [])]) {
    const ports = new Set((c.ports ?? []).map((p) => p.name));
    for (const probe of ["readinessProbe", "livenessProbe"]) {
      const p = c[probe]?.httpGet?.port;
      if (p !== undefined) check(`${id}.${c.name}.${probe}.port`, typeof p === "number" || ports.has(p), `no port named ${p}`);
    }
    for (const e of c.env ?? []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref) check(`${id}.${c.name}.env.${e.name}`, secrets.get(ref.name)?.stringData?.[ref.key] !== undefined,
        `no key ${ref.key} in Secret ${ref.name}`);
    }
    // Files the command reads are where a volume puts them.
    const mounts = (c.volumeMounts ?? []).map((m) => m.mountPath);
    for (const arg of c.command ?? []) {
      if (!arg.startsWith("/etc/b3os/")) continue;
      check(`${id}.${c.name}.mounted.${path.basename(arg)}`, mounts.some((m) => arg === m || arg.startsWith(m + "/")),
        `${arg} is not under a volume mount`);
      const secretFile = arg.startsWith("/etc/b3os/secret/") ? path.basename(arg) : null;
      if (secretFile) check(`${id}.${c.name}.secret_key.${secretFile}`, [...secrets.values()].some((s) => s.stringData?.[secretFile] !== undefined),
        `no Secret has the key ${secretFile}`);
    }
  }
}
for (const s of byKind("Service")) {
  const sel = s.spec.selector ?? {};
  const target = workloads.find((w) => Object.entries(sel).every(([k, v]) => w.spec.template.metadata.labels?.[k] === v));
  check(`Service.${s.metadata.name}.selects`, !!target, `selector ${JSON.stringify(sel)} matches no workload`);
  if (target) {
    const names = new Set(target.spec.template.spec.containers.flatMap((c) => (c.ports ?? []).map((p) => p.name)));
    for (const p of s.spec.ports) check(`Service.${s.metadata.name}.port.${p.name}`, typeof p.targetPort === "number" || names.has(p.targetPort), `no port ${p.targetPort}`);
  }
}
const router = byKind("Deployment").find((d) => d.metadata.name === "b3os-router");
const rsc = router?.spec.template.spec.containers[0].securityContext ?? {};
check("router.unprivileged", rsc.runAsNonRoot === true && rsc.allowPrivilegeEscalation === false && !rsc.privileged,
  JSON.stringify(rsc));
const node = byKind("DaemonSet").find((d) => d.metadata.name === "b3osd");
check("b3osd.host_pid_and_network", node?.spec.template.spec.hostPID === true && node?.spec.template.spec.hostNetwork === true,
  "b3osd needs hostPID (sandboxes outlive it) and hostNetwork (sandbox networks)");
check("b3osd.prometheus", node?.spec.template.metadata.annotations?.["prometheus.io/scrape"] === "true", "no scrape annotation");
{
  // The router's scrape port is one its container declares and its command listens on.
  const rt = byKind("Deployment").find((d) => d.metadata.name === "b3os-router")?.spec.template;
  const port = rt?.metadata.annotations?.["prometheus.io/port"];
  const c = rt?.spec.containers[0];
  check("router.prometheus", rt?.metadata.annotations?.["prometheus.io/scrape"] === "true" &&
        (c?.ports ?? []).some((p) => String(p.containerPort) === port) &&
        (c?.command ?? []).some((a) => a.endsWith(":" + port)), `scrape port ${port} not declared or not listened on`);
}

// The validator itself can fail: a replica count as a string, a container without an image.
const broken = structuredClone(router);
broken.spec.replicas = "two";
delete broken.spec.template.spec.containers[0].image;
try {
  await validate(broken);
  fail("validator.refuses_broken", "a Deployment with replicas \"two\" passed");
} catch {
  pass("validator.refuses_broken");
}

console.log(`kubernetes: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);

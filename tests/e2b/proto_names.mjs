// The field names b3osd's envd speaks (daemon/e2b/envd.cc writes them by hand: there is no
// Connect library for C++ in Debian) against the .proto descriptors the pinned e2b SDK itself
// carries: each file descriptor the SDK embeds is decoded with @bufbuild/protobuf (the SDK's
// own dependency), and every message, field, enum value and method named below must be in it
// with that proto3 JSON name. A renamed field in a new SDK fails here, not in a user's agent.
// Prints PASS/FAIL lines and "# proto_names: N failed".
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fromBinary } from '@bufbuild/protobuf'
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt'

const require = createRequire(import.meta.url)
const sdk = readFileSync(require.resolve('e2b'), 'utf8')
const files = [...sdk.matchAll(/fileDesc\)\("([A-Za-z0-9+/=]+)"/g)].map((m) =>
  fromBinary(FileDescriptorProtoSchema, Buffer.from(m[1], 'base64')))
let failed = 0
const result = (ok, name, why) => {
  if (!ok) failed++
  console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`)
}
result(files.some((f) => f.name === 'process/process.proto') && files.some((f) => f.name === 'filesystem/filesystem.proto'),
  'proto.descriptors_found', `the SDK embeds: ${files.map((f) => f.name).join(', ')}`)

// message -> its fields and their JSON names, nested messages as "Outer.Inner"
const messages = new Map()
const enums = new Map()
const services = new Map()
const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase())
function walk(pkg, prefix, m) {
  const full = `${pkg}.${prefix}${m.name}`
  messages.set(full, new Map(m.field.map((f) => [f.jsonName || camel(f.name), f])))
  for (const n of m.nestedType) walk(pkg, `${prefix}${m.name}.`, n)
  for (const e of m.enumType) enums.set(`${full}.${e.name}`, e.value.map((v) => v.name))
}
for (const f of files) {
  for (const m of f.messageType) walk(f.package, '', m)
  for (const e of f.enumType) enums.set(`${f.package}.${e.name}`, e.value.map((v) => v.name))
  for (const s of f.service) services.set(`${f.package}.${s.name}`, s.method.map((x) => x.name))
}

// What daemon/e2b/envd.cc reads and writes.
const used = {
  'process.ProcessConfig': ['cmd', 'args', 'envs', 'cwd'],
  'process.StartRequest': ['process', 'pty', 'tag', 'stdin'],
  'process.ConnectRequest': ['process'],
  'process.ProcessSelector': ['pid', 'tag'],
  'process.StartResponse': ['event'],
  'process.ConnectResponse': ['event'],
  'process.ProcessEvent': ['start', 'data', 'end', 'keepalive'],
  'process.ProcessEvent.StartEvent': ['pid'],
  'process.ProcessEvent.DataEvent': ['stdout', 'stderr', 'pty'],
  'process.ProcessEvent.EndEvent': ['exitCode', 'exited', 'status', 'error'],
  'process.ListResponse': ['processes'],
  'process.ProcessInfo': ['config', 'pid', 'tag'],
  'process.SendInputRequest': ['process', 'input'],
  'process.ProcessInput': ['stdin', 'pty'],
  'process.SendSignalRequest': ['process', 'signal'],
  'process.CloseStdinRequest': ['process'],
  'filesystem.StatRequest': ['path'],
  'filesystem.StatResponse': ['entry'],
  'filesystem.MakeDirRequest': ['path'],
  'filesystem.MakeDirResponse': ['entry'],
  'filesystem.MoveRequest': ['source', 'destination'],
  'filesystem.MoveResponse': ['entry'],
  'filesystem.RemoveRequest': ['path'],
  'filesystem.ListDirRequest': ['path', 'depth'],
  'filesystem.ListDirResponse': ['entries'],
  'filesystem.EntryInfo': ['name', 'type', 'path', 'size', 'mode', 'permissions', 'owner', 'group', 'modifiedTime', 'symlinkTarget'],
  'filesystem.WatchDirRequest': ['path', 'recursive', 'includeEntry', 'allowNetworkMounts'],
  'filesystem.WatchDirResponse': ['start', 'filesystem', 'keepalive'],
  'filesystem.FilesystemEvent': ['name', 'type'],
}
for (const [msg, fields] of Object.entries(used)) {
  const have = messages.get(msg)
  if (!have) { result(false, `proto.${msg}`, 'no such message in the SDK'); continue }
  const missing = fields.filter((f) => !have.has(f))
  result(missing.length === 0, `proto.${msg}`, `not in the SDK's descriptor: ${missing.join(', ')} (it has ${[...have.keys()].join(', ')})`)
}
const values = {
  'process.Signal': ['SIGNAL_SIGTERM', 'SIGNAL_SIGKILL'],
  'filesystem.FileType': ['FILE_TYPE_UNSPECIFIED', 'FILE_TYPE_FILE', 'FILE_TYPE_DIRECTORY', 'FILE_TYPE_SYMLINK'],
  'filesystem.EventType': ['EVENT_TYPE_CREATE', 'EVENT_TYPE_WRITE', 'EVENT_TYPE_REMOVE', 'EVENT_TYPE_RENAME', 'EVENT_TYPE_CHMOD'],
}
for (const [e, names] of Object.entries(values)) {
  const have = enums.get(e) ?? []
  const missing = names.filter((n) => !have.includes(n))
  result(missing.length === 0, `proto.${e}`, `missing values: ${missing.join(', ')} (it has ${have.join(', ')})`)
}
const methods = {
  'process.Process': ['List', 'Connect', 'Start', 'Update', 'StreamInput', 'SendInput', 'SendSignal', 'CloseStdin'],
  'filesystem.Filesystem': ['Stat', 'MakeDir', 'Move', 'ListDir', 'Remove', 'WatchDir', 'CreateWatcher', 'GetWatcherEvents', 'RemoveWatcher'],
}
for (const [s, names] of Object.entries(methods)) {
  const have = services.get(s) ?? []
  const extra = have.filter((n) => !names.includes(n))
  const missing = names.filter((n) => !have.includes(n))
  result(!extra.length && !missing.length, `proto.service.${s}`,
    `the SDK's service has ${extra.length ? 'new methods ' + extra.join(', ') : ''}${missing.length ? ' and lacks ' + missing.join(', ') : ''}`)
}
console.log(`# proto_names: ${failed} failed`)
process.exit(failed ? 1 : 0)

#!/usr/bin/env python3
"""Checks b3osd's answers and docs against docs/openapi.yaml.

  openapi_check.py validate RESPONSES.jsonl [--spec FILE] [--coverage]
      Each line of RESPONSES.jsonl is one response the e2e suites received (tests/e2e/lib.sh
      writes them): {"method", "path" (as requested, query included), "status",
      "content_type", "body" (text, or null with "skipped": why)}. Each is matched to a path
      and method of the document and to the response of its status (or `default`); a JSON
      body is validated against that response's schema (JSON Schema 2020-12). Non-JSON bodies
      (downloads, SSE) and bodies left out for size are counted, not validated. A request on
      no documented path, or with a method the path does not take, is held to the document's
      `x-b3os-unmatched` responses. A b3os error body must also carry a code of its status.
      Exit 1 if any response is invalid or its route, status or content type is not in the
      document.

  openapi_check.py check-docs [--spec FILE]
      The error codes and their statuses in openapi.yaml (schemas Error400 ... Error503, which
      must split the ErrorCode enum between them), in docs/api.md's error table and in
      common/error.cc's table are the same. Also: every $ref of the document resolves and
      every schema is a valid 2020-12 schema. Exit 1 with the differences otherwise.

Needs Debian's python3-yaml and python3-jsonschema (scripts/install-deps.sh).
"""
import json
import os
import re
import sys
from urllib.parse import unquote

try:
    import jsonschema
    import yaml
except ImportError as e:  # a python3 on PATH without Debian's packages: try Debian's own
    debian = "/usr/bin/python3"
    if (os.path.exists(debian) and not os.environ.get("B3OS_OPENAPI_CHECK_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(debian)):
        os.environ["B3OS_OPENAPI_CHECK_REEXEC"] = "1"
        os.execv(debian, [debian] + sys.argv)
    sys.exit(f"openapi_check: {e}; install python3-yaml and python3-jsonschema (scripts/install-deps.sh)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_SPEC = os.path.join(ROOT, "docs", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load_spec(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def pointer(doc, ref):
    """The node a local $ref ("#/a/b") names; KeyError if there is none."""
    if not ref.startswith("#/"):
        raise KeyError(f"only local references are used here: {ref}")
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return node


def deref(doc, node):
    seen = 0
    while isinstance(node, dict) and "$ref" in node:
        node = pointer(doc, node["$ref"])
        seen += 1
        if seen > 20:
            raise KeyError("a $ref loop")
    return node


# ---- the error-code tables -------------------------------------------------------------------

def openapi_error_statuses(doc):
    """code -> status from the Error<NNN> schemas; problems found on the way."""
    schemas = doc["components"]["schemas"]
    problems = []
    codes = schemas["ErrorCode"]["enum"]
    out = {}
    for name, schema in schemas.items():
        m = re.fullmatch(r"Error(\d{3})", name)
        if not m:
            continue
        status = int(m.group(1))
        try:
            enum = schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
        except (KeyError, IndexError, TypeError):
            problems.append(f"openapi.yaml: {name} does not have the shape allOf [Error, {{code: {{enum}}}}]")
            continue
        for code in enum:
            if code in out:
                problems.append(f"openapi.yaml: {code} is in Error{out[code]} and in {name}")
            if code not in codes:
                problems.append(f"openapi.yaml: {name} has {code}, which is not in ErrorCode's enum")
            out[code] = status
    for code in codes:
        if code not in out:
            problems.append(f"openapi.yaml: ErrorCode {code} is in no Error<status> schema")
    return out, problems


def api_md_error_statuses(path):
    """code -> status from the `| status | codes |` table of docs/api.md."""
    out = {}
    in_table = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.strip().startswith("|") else None
            if cells and [c.lower() for c in cells[:2]] == ["status", "codes"]:
                in_table = True
                continue
            if not in_table:
                continue
            if not cells:
                if out:
                    break
                continue
            if not re.fullmatch(r"\d{3}", cells[0]):
                continue  # the --- row
            # Codes are the backticked names outside parentheses (those hold remarks).
            text = re.sub(r"\([^()]*\)", "", "|".join(cells[1:]))
            for code in re.findall(r"`([^`]+)`", text):
                if re.fullmatch(r"[a-z][a-z0-9_]*", code):
                    out[code] = int(cells[0])
    return out


def error_cc_statuses(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return {code: int(status) for code, status in
            re.findall(r'\{\s*ErrorCode::k\w+\s*,\s*"([a-z0-9_]+)"\s*,\s*(\d{3})\s*[,}]', text)}


def check_refs_and_schemas(doc):
    problems = []

    def walk(node, where):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    pointer(doc, ref)
                except (KeyError, IndexError, ValueError):
                    problems.append(f"openapi.yaml: {where}: $ref {ref} does not resolve")
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(doc, "#")
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as e:
            problems.append(f"openapi.yaml: schema {name} is not valid 2020-12: {e.message}")
    if not str(doc.get("openapi", "")).startswith("3.1"):
        problems.append(f"openapi.yaml: openapi is {doc.get('openapi')!r}, want 3.1.x")
    return problems


def check_docs(spec_path):
    doc = load_spec(spec_path)
    problems = check_refs_and_schemas(doc)
    oa, p = openapi_error_statuses(doc)
    problems += p
    md = api_md_error_statuses(os.path.join(ROOT, "docs", "api.md"))
    cc = error_cc_statuses(os.path.join(ROOT, "common", "error.cc"))
    if not md:
        problems.append("docs/api.md: no '| status | codes |' table found")
    if not cc:
        problems.append("common/error.cc: no {ErrorCode::kX, \"name\", status} rows found")
    tables = {"openapi.yaml": oa, "docs/api.md": md, "common/error.cc": cc}
    diff = []
    for code in sorted(set(oa) | set(md) | set(cc)):
        got = {name: t.get(code) for name, t in tables.items()}
        if len(set(got.values())) != 1:
            diff.append(f"  {code:26} " + ", ".join(f"{n} {s if s is not None else '(missing)'}" for n, s in got.items()))
    if diff:
        problems.append("the error tables differ:\n" + "\n".join(diff))
    if problems:
        for line in problems:
            print(f"FAIL {line}")
        return 1
    print(f"check-docs: {len(oa)} error codes agree in openapi.yaml, docs/api.md and common/error.cc; "
          f"{len(doc['paths'])} paths, every $ref resolves, every schema is valid")
    return 0


# ---- validating responses -----------------------------------------------------------------------

def segments(path):
    path = path.split("?", 1)[0].split("#", 1)[0]
    return [unquote(s) for s in path.split("/") if s]


class Router:
    def __init__(self, doc):
        self.doc = doc
        self.routes = []
        for template, item in doc["paths"].items():
            params = {}
            for p in item.get("parameters", []):
                p = deref(doc, p)
                if p.get("in") == "path":
                    params[p["name"]] = p
            segs = [s for s in template.split("/") if s]
            greedy = False
            if segs and re.fullmatch(r"\{[^}]+\}", segs[-1]):
                greedy = bool(params.get(segs[-1][1:-1], {}).get("x-b3os-matches-slashes"))
            self.routes.append((template, segs, greedy, item))

    def match(self, path):
        """(template, path item) of the most specific documented path, or (None, None)."""
        got = segments(path)
        best = None
        for template, segs, greedy, item in self.routes:
            if not (len(got) == len(segs) or (greedy and len(got) >= len(segs))):
                continue
            literal = 0
            for i, s in enumerate(segs):
                if re.fullmatch(r"\{[^}]+\}", s):
                    continue
                if got[i] != s:
                    break
                literal += 1
            else:
                rank = (literal, not greedy)
                if best is None or rank > best[0]:
                    best = (rank, template, item)
        return (best[1], best[2]) if best else (None, None)


def pick_response(responses, status):
    key = str(status)
    if key in responses:
        return key, responses[key]
    wild = f"{key[0]}XX"
    if wild in responses:
        return wild, responses[wild]
    if "default" in responses:
        return "default", responses["default"]
    return None, None


def is_json_type(media):
    return media == "application/json" or media.endswith("+json")


class Checker:
    def __init__(self, doc):
        self.doc = doc
        self.router = Router(doc)
        self.validators = {}
        self.code_status, _ = openapi_error_statuses(doc)
        self.components = {"components": doc.get("components", {})}
        try:
            self.format_checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
        except AttributeError:
            self.format_checker = jsonschema.FormatChecker()

    def validator(self, schema):
        v = self.validators.get(id(schema))
        if v is None:
            # The schema's $refs ("#/components/schemas/X") resolve against a root that
            # carries the document's components.
            root = dict(schema)
            root.update(self.components)
            root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            v = jsonschema.Draft202012Validator(root, format_checker=self.format_checker)
            self.validators[id(schema)] = (v, schema)  # keep schema alive: its id is the key
        else:
            v = v[0]
        return v

    def check(self, entry):
        """(outcome, operation, detail); outcome: valid, invalid, undocumented, skipped_type, skipped_size."""
        method = str(entry.get("method", "")).lower()
        path = entry.get("path", "")
        status = int(entry.get("status", 0))
        template, item = self.router.match(path)
        if item is None:
            responses = self.doc.get("x-b3os-unmatched", {}).get("route", {})
            op_name = "(no documented path)"
        elif method not in item:
            responses = self.doc.get("x-b3os-unmatched", {}).get("method", {})
            op_name = f"{method.upper()} {template} (method not documented)"
        else:
            responses = item[method].get("responses", {})
            op_name = f"{method.upper()} {template}"
        key, response = pick_response(responses, status)
        if response is None:
            return "undocumented", op_name, f"status {status} is not documented for {op_name}"
        response = deref(self.doc, response)
        op = f"{op_name} {key}"
        content = response.get("content") or {}
        ctype = (entry.get("content_type") or "").split(";", 1)[0].strip().lower()
        body = entry.get("body")
        if not content:
            if body:
                return "undocumented", op, "the response has a body but the document gives it none"
            return "valid", op, ""
        media = content.get(ctype)
        if media is None:
            return "undocumented", op, f"content type {ctype or '(none)'!r} is not documented (documented: {', '.join(content)})"
        if body is None:
            return "skipped_size", op, entry.get("skipped", "body not recorded")
        if not is_json_type(ctype):
            return "skipped_type", op, ""
        try:
            data = json.loads(body)
        except ValueError as e:
            return "invalid", op, f"the body is not JSON ({e}): {body[:200]!r}"
        schema = (media or {}).get("schema")
        if schema is not None:
            v = self.validator(schema)
            errors = list(v.iter_errors(data))
            if errors:
                best = jsonschema.exceptions.best_match(errors)
                where = "/" + "/".join(str(p) for p in best.absolute_path)
                more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
                if best.validator == "not":  # its message would print the whole instance
                    message = f"matches what it must not: {json.dumps(best.validator_value)}"
                else:
                    message = best.message
                return "invalid", op, f"at {where}: {message[:400]}{more}"
        # A b3os error's code must be one of its status's codes (a 2xx body may carry an
        # `error` of its own: a failed template build's says why it failed).
        err = data.get("error") if isinstance(data, dict) and status >= 400 else None
        if isinstance(err, dict) and "type" not in err and err.get("code") in self.code_status:
            want = self.code_status[err["code"]]
            if want != status:
                return "invalid", op, f"error code {err['code']} belongs to status {want}, not {status}"
        return "valid", op, ""


def validate(spec_path, responses_path, coverage=False):
    doc = load_spec(spec_path)
    checker = Checker(doc)
    counts = {"valid": 0, "invalid": 0, "undocumented": 0, "skipped_type": 0, "skipped_size": 0}
    no_answer = 0
    failures = []
    seen_ops = {}
    try:
        f = open(responses_path, encoding="utf-8", errors="replace")
    except OSError as e:
        print(f"FAIL cannot read {responses_path}: {e.strerror}")
        return 1
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                entry = json.loads(line)
            except ValueError as e:
                failures.append(f"line {n}: not a JSON line ({e})")
                counts["invalid"] += 1
                continue
            if int(entry.get("status") or 0) == 0:
                no_answer += 1  # curl got no answer: nothing to check
                continue
            outcome, op, detail = checker.check(entry)
            counts[outcome] += 1
            seen_ops[op] = seen_ops.get(op, 0) + 1
            if outcome in ("invalid", "undocumented"):
                failures.append(f"{entry.get('method')} {entry.get('path')} {entry.get('status')}: {outcome}: {detail}")
    total = sum(counts.values())
    print(f"openapi: {total} responses: {counts['valid']} valid, "
          f"{counts['invalid']} invalid, {counts['undocumented']} not in the document; "
          f"skipped {counts['skipped_type']} non-JSON bodies and {counts['skipped_size']} bodies over 1 MiB"
          + (f"; {no_answer} requests got no answer" if no_answer else ""))
    for line in failures[:200]:
        print(f"FAIL {line}")
    if len(failures) > 200:
        print(f"FAIL ... and {len(failures) - 200} more")
    if coverage:
        for op in sorted(seen_ops):
            print(f"  {seen_ops[op]:5}  {op}")
    if total == 0:
        print("FAIL no responses were recorded")
        return 1
    return 1 if failures else 0


def main(argv):
    args = list(argv[1:])
    spec = DEFAULT_SPEC
    if "--spec" in args:
        i = args.index("--spec")
        spec = args[i + 1]
        del args[i:i + 2]
    coverage = "--coverage" in args
    args = [a for a in args if a != "--coverage"]
    if args[:1] == ["validate"] and len(args) == 2:
        return validate(spec, args[1], coverage)
    if args == ["check-docs"]:
        return check_docs(spec)
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

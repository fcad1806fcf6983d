"""Checks of the chart's monitoring objects, run by hack/monitoring-check.sh.

  objects MANIFEST CRD...    validates every monitoring.coreos.com object of a `helm template` output against the
                             openAPIV3Schema of its CRD (prometheus-operator's example/prometheus-operator-crd),
                             strictly: a field the schema does not declare is an error, where the apiserver would
                             drop it without a word. Every object's labels must be valid label values.
  rules MANIFEST OUT         writes the groups of the rendered PrometheusRule as a promtool rules file.
  dashboard JSON MANIFEST OUT
                             checks the Grafana dashboard's shape (every query on the `datasource` variable) and
                             that the rendered ConfigMap carries it unchanged, and writes its queries as recording
                             rules, so that promtool parses each one.
  cases RULES TESTS          lists, for each alert of the rules file, the unit tests' cases in which it fires and
                             those in which it stays quiet; an alert without both is an error.
  metrics FILE...            lists the slipway_* metric names the rules files use.
"""

import json
import re
import sys

import jsonschema
import yaml

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


# libyaml's loader when PyYAML has it: the CRDs load five times faster.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def documents(path):
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=LOADER) if d]


def strict(schema):
    """The CRD's structural schema as JSON Schema: unknown fields refused, Kubernetes' extensions spelled out."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) if k in ("items", "additionalProperties", "not") or k in ("anyOf", "oneOf", "allOf")
           else v for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def list_rules(schema, path=""):
    """(path, keys) of every x-kubernetes-list-type map or set in the schema, for the uniqueness checks."""
    found = []
    if not isinstance(schema, dict):
        return found
    if schema.get("x-kubernetes-list-type") in ("map", "set"):
        found.append((path, schema.get("x-kubernetes-list-map-keys")))
    for name, sub in schema.get("properties", {}).items():
        found += list_rules(sub, f"{path}.{name}")
    if "items" in schema:
        found += list_rules(schema["items"], f"{path}[]")
    return found


def at(obj, path):
    """The values at a path such as `.spec.groups[].rules` in obj."""
    values = [obj]
    for part in re.findall(r"\.[^.\[]+|\[\]", path):
        nxt = []
        for v in values:
            if part == "[]":
                nxt += v if isinstance(v, list) else []
            elif isinstance(v, dict) and part[1:] in v:
                nxt.append(v[part[1:]])
        values = nxt
    return values


def check_metadata(doc, where):
    meta = doc.get("metadata") or {}
    name = meta.get("name", "")
    if not isinstance(name, str) or not DNS_NAME.match(name) or len(name) > 253:
        fail(f"{where}: metadata.name {name!r} is not a DNS subdomain name")
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            if not isinstance(value, str):
                fail(f"{where}: metadata.{field}.{key} is {value!r}, not a string")
            if not LABEL_NAME.match(key):
                fail(f"{where}: metadata.{field} key {key!r} is not a qualified name")
            if field == "labels" and (len(value) > 63 or not LABEL_VALUE.match(value)):
                fail(f"{where}: label {key}={value!r} is not a valid label value")


def cmd_objects(manifest, *crd_files):
    crds = {}
    for path in crd_files:
        for crd in documents(path):
            for version in crd["spec"]["versions"]:
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                crds[key] = (version["schema"]["openAPIV3Schema"], path.rsplit("/", 1)[-1])
    checked = 0
    for doc in documents(manifest):
        where = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        check_metadata(doc, where)
        if not str(doc.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
            continue
        key = (doc["apiVersion"], doc["kind"])
        if key not in crds:
            fail(f"{where}: none of the CRDs given serves {key[0]} {key[1]}")
        schema, source = crds[key]
        validator = jsonschema.Draft4Validator(strict(schema))
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for e in errors:
            print(f"  {where}: {'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}",
                  file=sys.stderr)
        if errors:
            fail(f"{where} does not match the schema of {source}")
        for path, keys in list_rules(schema):
            for items in at(doc, path):
                seen = [tuple(i.get(k) for k in keys) if keys else json.dumps(i, sort_keys=True) for i in items]
                if len(seen) != len(set(seen)):
                    fail(f"{where}: {path} holds two items with the same {keys or 'value'}")
        checked += 1
        print(f"  {doc['kind']:<15} {doc['metadata']['name']:<24} matches {source}")
    return checked


def cmd_rules(manifest, out):
    rules = [d for d in documents(manifest) if d.get("kind") == "PrometheusRule"]
    if len(rules) != 1:
        fail(f"{manifest} holds {len(rules)} PrometheusRules, not one")
    groups = rules[0]["spec"]["groups"]
    with open(out, "w") as f:
        yaml.safe_dump({"groups": groups}, f, sort_keys=False, width=120)
    names = [r.get("alert") for g in groups for r in g["rules"]]
    print(f"  {len(names)} alerts rendered: {' '.join(names)}")


def cmd_dashboard(path, manifest, out):
    with open(path) as f:
        text = f.read()
    dashboard = json.loads(text)
    maps = [d for d in documents(manifest) if d.get("kind") == "ConfigMap" and "slipway.json" in d.get("data", {})]
    if len(maps) != 1:
        fail(f"{manifest} holds {len(maps)} dashboard ConfigMaps, not one")
    if maps[0]["data"]["slipway.json"].strip() != text.strip():
        fail(f"the ConfigMap {maps[0]['metadata']['name']} does not carry {path} unchanged")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource" or \
            variables["datasource"].get("query") != "prometheus":
        fail(f"{path}: no `datasource` variable of the prometheus type")
    if dashboard.get("uid") != "slipway":
        fail(f"{path}: uid is {dashboard.get('uid')!r}, not slipway")
    rules, ids = [], set()
    panels = [p for p in dashboard["panels"] if p.get("type") != "row"]
    for panel in panels:
        if panel["id"] in ids:
            fail(f"{path}: two panels have the id {panel['id']}")
        ids.add(panel["id"])
        for target in [panel] + panel.get("targets", []):
            if target.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{path}: panel {panel['title']!r} does not query the `datasource` variable")
        if not panel.get("targets"):
            fail(f"{path}: panel {panel['title']!r} has no query")
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "5m").replace("$namespace", "slipway-system")
            if "$" in expr:
                fail(f"{path}: panel {panel['title']!r} uses a variable the check does not know: {expr}")
            rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr})
    with open(out, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, sort_keys=False, width=120)
    print(f"  ConfigMap {maps[0]['metadata']['name']} carries {path.rsplit('/', 1)[-1]}: {len(panels)} panels, "
          f"{len(rules)} queries, all on the `datasource` variable")


def cmd_cases(rules_path, tests_path):
    with open(rules_path) as f:
        alerts = [r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r]
    with open(tests_path) as f:
        tests = yaml.safe_load(f)["tests"]
    cases = {a: {"fires": [], "quiet": []} for a in alerts}
    for test in tests:
        for case in test.get("alert_rule_test", []):
            if case["alertname"] not in cases:
                fail(f"{tests_path}: test {test['name']!r} expects {case['alertname']}, which the rules lack")
            outcome = "fires" if case.get("exp_alerts") else "quiet"
            cases[case["alertname"]][outcome].append(f"{test['name']} @{case['eval_time']}")
    for alert in alerts:
        for outcome in ("fires", "quiet"):
            if not cases[alert][outcome]:
                fail(f"{tests_path}: no case in which {alert} {outcome if outcome == 'fires' else 'stays quiet'}")
        print(f"  {alert}")
        print(f"    fires: {', '.join(cases[alert]['fires'])}")
        print(f"    quiet: {', '.join(cases[alert]['quiet'])}")


def cmd_metrics(*paths):
    names = set()
    for path in paths:
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    names.update(re.findall(r"\bslipway_[a-z0-9_]+", rule["expr"]))
    for name in sorted(names):
        print(f"  {name}")


if __name__ == "__main__":
    commands = {"objects": cmd_objects, "rules": cmd_rules, "dashboard": cmd_dashboard, "cases": cmd_cases,
                "metrics": cmd_metrics}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    commands[sys.argv[1]](*sys.argv[2:])

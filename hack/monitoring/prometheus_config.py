"""The Prometheus configuration prometheus-operator would generate from the chart's rendered monitoring objects, for
a Prometheus run outside the cluster (hack/prometheus.sh, the e2e tier's).

  prometheus_config.py MANIFEST KUBECONFIG OUT_DIR

reads the PodMonitors and the PrometheusRule of a `helm template` output and writes OUT_DIR/prometheus.yml and
OUT_DIR/rules.yaml. Each PodMonitor endpoint becomes a scrape job with Kubernetes pod discovery (through KUBECONFIG)
in the PodMonitor's namespaces, and the relabelings prometheus-operator writes for it: keep the pods its selector
matches and the container port its endpoint names, drop finished pods, set `namespace`, `pod`, `container` and
`endpoint`, and the job `<namespace>/<name>` unless the endpoint's own relabelings (applied last, as the operator
applies them) set another. The rules file holds the PrometheusRule's groups as they are.
"""

import os
import re
import sys

import yaml

from check import documents, fail


def sanitize(label):
    """A Kubernetes label name as Prometheus's discovery spells it in a meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def relabeling(r):
    """A PodMonitor relabeling (camelCase) as a Prometheus relabel_config (snake_case)."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {names.get(k, k): v for k, v in r.items()}
    if "action" in out:
        out["action"] = out["action"].lower()
    return out


def scrape_jobs(monitor, kubeconfig):
    meta, spec = monitor["metadata"], monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [meta["namespace"]]
    selector = spec.get("selector", {})
    if selector.get("matchExpressions"):
        fail(f"PodMonitor {meta['name']}: matchExpressions are not translated")
    jobs = []
    for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
        relabel = [{"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"}]
        for label, value in sorted(selector.get("matchLabels", {}).items()):
            name = sanitize(label)
            relabel.append({"action": "keep",
                            "source_labels": [f"__meta_kubernetes_pod_label_{name}",
                                              f"__meta_kubernetes_pod_labelpresent_{name}"],
                            "regex": f"({re.escape(value)});true"})
        if "port" not in endpoint:
            fail(f"PodMonitor {meta['name']}: endpoint {i} names no port")
        relabel += [
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "regex": re.escape(endpoint["port"])},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
        ]
        relabel += [relabeling(r) for r in endpoint.get("relabelings", [])]
        job = {
            "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
            "honor_labels": False,
            "metrics_path": endpoint.get("path", "/metrics"),
            "scheme": endpoint.get("scheme", "http"),
            "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": kubeconfig,
                                       "namespaces": {"names": namespaces}}],
            "relabel_configs": relabel,
        }
        for ours, theirs in (("interval", "scrape_interval"), ("scrapeTimeout", "scrape_timeout")):
            if ours in endpoint:
                job[theirs] = endpoint[ours]
        jobs.append(job)
    return jobs


def main(manifest, kubeconfig, out_dir):
    docs = documents(manifest)
    monitors = [d for d in docs if d.get("kind") == "PodMonitor"]
    rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if not monitors:
        fail(f"{manifest} holds no PodMonitor")
    if len(rules) != 1:
        fail(f"{manifest} holds {len(rules)} PrometheusRules, not one")
    jobs = [job for m in monitors for job in scrape_jobs(m, os.path.abspath(kubeconfig))]
    # Rules are evaluated as often as the targets are scraped, when they all are at one interval.
    intervals = {job.get("scrape_interval") for job in jobs} - {None}
    every = intervals.pop() if len(intervals) == 1 else "30s"
    config = {
        "global": {"scrape_interval": every, "evaluation_interval": every},
        "rule_files": ["rules.yaml"],
        "scrape_configs": jobs,
    }
    with open(os.path.join(out_dir, "rules.yaml"), "w") as f:
        yaml.safe_dump({"groups": rules[0]["spec"]["groups"]}, f, sort_keys=False, width=120)
    with open(os.path.join(out_dir, "prometheus.yml"), "w") as f:
        yaml.safe_dump(config, f, sort_keys=False, width=120)
    print(f"{len(jobs)} scrape jobs: {' '.join(j['job_name'] for j in jobs)}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])

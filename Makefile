# slipway — common tasks. `make help` lists them.
SHELL := /usr/bin/env bash

.PHONY: help up down test lint unit cluster-test e2e-test images crds bench build

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

up: ## Bring up the local platform and print how to reach it
	@hack/up.sh

down: ## Stop the local platform (components, database, node and control plane)
	@hack/platform.sh stop
	@hack/postgres.sh stop
	@hack/node.sh stop

test: ## Run every test tier (lint, unit, cluster, e2e); what CI runs
	@hack/test.sh

lint: ## rustfmt, clippy and helm lint only
	@hack/test.sh lint

unit: ## Unit tests only (no cluster)
	@hack/test.sh unit

cluster-test: ## Cluster tests only, against a fresh local control plane
	@hack/test.sh cluster

e2e-test: ## End-to-end tests only, against a fresh local single-node cluster
	@hack/test.sh e2e

images: ## Build the local images (pause, CoreDNS, busybox, warm-base stand-ins) if missing
	@hack/build-images.sh >/dev/null

crds: ## Regenerate the committed CRD YAML from the Rust types
	cargo run --quiet -- crds --dir crds/yaml
	cargo run --quiet -- crds --dir charts/slipway/crds

bench: ## Benchmarks that print figures (API, git, edge vs nginx, deploy to ready)
	@hack/bench.sh

build: ## Build the slipway binary (release)
	cargo build --release --locked

# The Kubernetes sandbox on a local kind cluster. Included from the Makefile (`include kube.mk`).
#
#   make sandbox-up     a local cluster + Chaos Mesh + workload images + the mlsandbox chart + one Sandbox (Ready),
#                       left running: kind where Docker runs privileged containers, else the built-in real node
#                       (`mlsandbox cluster up`; ENGINE=kind|node forces one)
#   make sandbox-down   take it down, leaving nothing behind (`mlsandbox cluster down`)
#   make sandbox-status its components, the Sandbox, memory (`mlsandbox cluster status`)
#   make kube-validate  helm lint/template + kubeconform of everything, offline (no cluster)
#   make sandbox-images the workload images (trainer, model server, gateway/operator) from BASE_IMAGE
#   make images-test    build each image against a local debootstrap base and run its smoke check
#                       (no registry needed; as root it installs and starts Debian's docker engine)
#   make node-images    the real-node tier's images (base, pause, CoreDNS, MinIO, MLflow, Prefect and the
#                       workload images), built only when their inputs changed (as root: docker engine)
#   make node-test      the real-node tier (tests/node): a kubelet on this machine, the chart on it (root)
#
# kind needs docker, kind and helm (`scripts/install-kube-tools.sh --with-kind` builds kind and helm into
# $MLSANDBOX_HOME/bin); the real node needs root and `scripts/install-kube-tools.sh --with-control-plane
# --with-node`, and a docker engine the first time its images are built (scripts/docker-engine.sh).
# Versions are pinned in versions.env.
include versions.env

MLSANDBOX_HOME ?= $(HOME)/.cache/mlsandbox
KUBE_BIN := $(MLSANDBOX_HOME)/bin
KIND ?= $(or $(shell command -v kind 2>/dev/null),$(KUBE_BIN)/kind)
HELM ?= $(or $(wildcard $(KUBE_BIN)/helm),$(shell command -v helm 2>/dev/null),$(KUBE_BIN)/helm)
KUBECTL ?= kubectl
DOCKER ?= docker

SANDBOX ?= default
SCENARIO ?= tabular-quality-basic
SEED ?= 7
BASE_IMAGE ?= debian:bookworm-slim
IMAGE_TAG ?= 0.1.0
TRAINER_IMAGE := mlsandbox/trainer:$(IMAGE_TAG)
MODEL_SERVER_IMAGE := mlsandbox/model-server:$(IMAGE_TAG)
GATEWAY_IMAGE := mlsandbox/gateway:$(IMAGE_TAG)

step = @printf '\033[1m[sandbox-up %s]\033[0m %s\n' "$$(date +%H:%M:%S)" "$(1)"

.PHONY: kube-check kube-tools kube-validate sandbox-up sandbox-down sandbox-images sandbox-base-image images-test \
  node-images node-test sandbox-status sandbox-bench

kube-check:
	@command -v $(DOCKER) >/dev/null 2>&1 || { echo "docker is needed: install Docker (https://docs.docker.com/engine/install/)"; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "docker is installed but its daemon does not answer: start Docker"; exit 1; }
	@test -x "$(KIND)" || { echo "kind is needed: run scripts/install-kube-tools.sh --with-kind (or install kind $(KIND_VERSION))"; exit 1; }
	@test -x "$(HELM)" || { echo "helm is needed: run make setup (or install helm $(HELM_VERSION))"; exit 1; }
	@command -v $(KUBECTL) >/dev/null 2>&1 || { echo "kubectl is needed: install it (https://kubernetes.io/docs/tasks/tools/)"; exit 1; }

kube-tools:
	@scripts/install-kube-tools.sh --with-kind

kube-validate: setup
	$(VENV)/bin/python -c 'from mlsandbox.cli.kube import kube_app; kube_app(["validate"])'

sandbox-images: kube-check
	$(call step,building $(TRAINER_IMAGE) $(MODEL_SERVER_IMAGE) $(GATEWAY_IMAGE) from $(BASE_IMAGE))
	$(DOCKER) build -q -f workloads/Dockerfile.trainer --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(TRAINER_IMAGE) .
	$(DOCKER) build -q -f workloads/Dockerfile.model-server --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(MODEL_SERVER_IMAGE) .
	$(DOCKER) build -q -f workloads/Dockerfile.gateway --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(GATEWAY_IMAGE) .

# A Debian base without any registry (debootstrap + docker import, cached): then
# `make sandbox-images BASE_IMAGE=mlsandbox/base:bookworm`.
sandbox-base-image:
	@scripts/build-base-image.sh mlsandbox/base:bookworm

images-test: setup
	@scripts/docker-engine.sh
	@scripts/run-tests.sh tests/images -m images

node-images: setup
	@scripts/docker-engine.sh
	$(VENV)/bin/python -m mlsandbox.backends.kube.node_images

node-test: setup
	@scripts/run-tests.sh tests/node -m node

# One command, two engines (mlsandbox.k8s_operator.local_cluster): kind when Docker runs privileged
# containers and kind is installed, otherwise the built-in real node of this machine (root). It says which
# and why, times each step, records the cluster under $(MLSANDBOX_HOME)/clusters and leaves it running:
# `mlsandbox run --backend kube ...` finds it with no flag. ENGINE=kind|node forces one.
ENGINE ?= auto

sandbox-up: setup
	@$(VENV)/bin/mlsandbox cluster up --engine $(ENGINE) --sandbox $(SANDBOX) --scenario $(SCENARIO) --seed $(SEED)

sandbox-down: setup
	@$(VENV)/bin/mlsandbox cluster down

sandbox-status: setup
	@$(VENV)/bin/mlsandbox cluster status

# N sandboxes playing episodes at once through the warm pool, on the cluster sandbox-up left running:
# claim latency, episodes per minute, the node's memory, what the node could not place
# (.bench/kube_pool.json; BENCH_POOL_N=1,4 and BENCH_POOL_EPISODES=2 by default).
sandbox-bench: setup
	@mkdir -p .bench
	$(PY) benchmarks/bench_kube_pool.py

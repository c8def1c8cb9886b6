# The Kubernetes sandbox on a local kind cluster. Included from the Makefile (`include kube.mk`).
#
#   make sandbox-up     kind cluster + Chaos Mesh + workload images + the mlsandbox chart + one Sandbox (Ready)
#   make sandbox-down   delete the kind cluster (and with it everything above)
#   make kube-validate  helm lint/template + kubeconform of everything, offline (no cluster)
#   make sandbox-images the workload images (trainer, model server, gateway/operator) from BASE_IMAGE
#   make images-test    build each image against a local debootstrap base and run its smoke check
#                       (no registry needed; as root it installs and starts Debian's docker engine)
#   make node-images    the real-node tier's images (base, pause, CoreDNS, MinIO, MLflow, Prefect and the
#                       workload images), built only when their inputs changed (as root: docker engine)
#   make node-test      the real-node tier (tests/node): a kubelet on this machine, the chart on it (root)
#
# Needs docker, kind, kubectl and helm (kind and helm: `scripts/install-kube-tools.sh --with-kind` builds
# them into $MLSANDBOX_HOME/bin). Versions are pinned in versions.env.
include versions.env

MLSANDBOX_HOME ?= $(HOME)/.cache/mlsandbox
KUBE_BIN := $(MLSANDBOX_HOME)/bin
KIND ?= $(or $(shell command -v kind 2>/dev/null),$(KUBE_BIN)/kind)
HELM ?= $(or $(wildcard $(KUBE_BIN)/helm),$(shell command -v helm 2>/dev/null),$(KUBE_BIN)/helm)
KUBECTL ?= kubectl
DOCKER ?= docker

KIND_CLUSTER ?= mlsandbox
KUBE_NAMESPACE ?= mlsandbox
SANDBOX ?= demo
SCENARIO ?= tabular-quality-basic
SEED ?= 7
BASE_IMAGE ?= debian:bookworm-slim
IMAGE_TAG ?= 0.1.0
TRAINER_IMAGE := mlsandbox/trainer:$(IMAGE_TAG)
MODEL_SERVER_IMAGE := mlsandbox/model-server:$(IMAGE_TAG)
GATEWAY_IMAGE := mlsandbox/gateway:$(IMAGE_TAG)
KUBE_CONTEXT := kind-$(KIND_CLUSTER)
K := $(KUBECTL) --context $(KUBE_CONTEXT)

step = @printf '\033[1m[sandbox-up %s]\033[0m %s\n' "$$(date +%H:%M:%S)" "$(1)"

.PHONY: kube-check kube-tools kube-validate sandbox-up sandbox-down sandbox-images sandbox-base-image images-test \
  node-images node-test

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

sandbox-up: kube-check sandbox-images
	$(call step,kind cluster $(KIND_CLUSTER) ($(KIND_NODE_IMAGE)))
	@$(KIND) get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' \
	  || $(KIND) create cluster --name $(KIND_CLUSTER) --config kind-config.yaml --image $(KIND_NODE_IMAGE) --wait 120s
	$(call step,Chaos Mesh $(CHAOS_MESH_VERSION))
	$(HELM) repo add chaos-mesh https://charts.chaos-mesh.org --force-update >/dev/null
	$(HELM) upgrade --install chaos-mesh chaos-mesh/chaos-mesh --version $(CHAOS_MESH_VERSION) \
	  --kube-context $(KUBE_CONTEXT) --namespace chaos-mesh --create-namespace \
	  --set chaosDaemon.runtime=containerd --set chaosDaemon.socketPath=/run/containerd/containerd.sock \
	  --set dashboard.create=false --set controllerManager.replicaCount=1 --wait --timeout 10m
	$(call step,loading the images into kind)
	$(KIND) load docker-image --name $(KIND_CLUSTER) $(TRAINER_IMAGE) $(MODEL_SERVER_IMAGE) $(GATEWAY_IMAGE)
	$(call step,mlsandbox chart (namespace $(KUBE_NAMESPACE)))
	$(HELM) upgrade --install mls charts/mlsandbox --kube-context $(KUBE_CONTEXT) \
	  --namespace $(KUBE_NAMESPACE) --create-namespace -f charts/mlsandbox/ci/kind-values.yaml \
	  --set operator.image.tag=$(IMAGE_TAG) --set workloads.trainerImage.tag=$(IMAGE_TAG) --wait --timeout 10m
	$(call step,Sandbox $(SANDBOX) (scenario $(SCENARIO)))
	@printf 'apiVersion: mlsandbox.dev/v1alpha1\nkind: Sandbox\nmetadata: {name: %s, namespace: %s}\nspec: {scenario: %s, seed: %s}\n' \
	  '$(SANDBOX)' '$(KUBE_NAMESPACE)' '$(SCENARIO)' '$(SEED)' | $(K) apply -f -
	$(K) wait -n $(KUBE_NAMESPACE) sandbox/$(SANDBOX) --for=condition=Ready --timeout=5m
	@$(K) get -n $(KUBE_NAMESPACE) sandbox/$(SANDBOX)
	$(call step,ready)
	@echo "  S3 (MinIO):  http://127.0.0.1:9000  (kubectl -n $(KUBE_NAMESPACE) get secret mls-mlsandbox-minio)"
	@echo "  MLflow:      http://127.0.0.1:5000"
	@echo "  Prefect API: http://127.0.0.1:4200/api"

sandbox-down:
	@if test -x "$(KIND)" && $(KIND) get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)'; then \
	  $(KIND) delete cluster --name $(KIND_CLUSTER); \
	else echo "no kind cluster $(KIND_CLUSTER): nothing to remove"; fi

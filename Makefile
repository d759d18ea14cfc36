# The two set-up commands: `make demo` (the main job) and `make test` (the suite).
# Both install what a fresh machine lacks: the Debian packages (Fashion-MNIST; qemu-user, which
# the tests use to check the AVX2 INT8 path on any CPU; DejaVu fonts, which the zoo renders text
# with) and a virtualenv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
APT_PACKAGES := dataset-fashion-mnist qemu-user fonts-dejavu-core
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup demo demo-full test bench bench-quick translator clean

# apt lists are needed too: the translator corpus is fetched with `apt-get download`.
setup: $(VENV)/.installed
	@ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || $(SUDO) apt-get update -qq
	@dpkg -s $(APT_PACKAGES) >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES); }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Main job: train (or reuse) a ResNet-50, quantize it with its own calibration images, and write
# the validation report (top-1 FP32 vs INT8, throughput, coverage, SQNR). `make demo` trains the
# short demo model (minutes); `make demo-full` the reference one the benchmarks use (4 epochs).
CACHE = $${QUANTIZE_CACHE:-$$HOME/.cache/quantize}
demo: RESNET50 = resnet50/demo
demo: BUILD = --demo
demo-full: RESNET50 = resnet50
demo demo-full: setup
	$(BIN)/python -m models.resnet50 build $(BUILD)
	$(BIN)/quantize $(CACHE)/$(RESNET50)/resnet50.onnx --calib $(CACHE)/$(RESNET50)/calib.npz \
		-o resnet50.int8.onnx --report resnet50-report.html --evaluate resnet50

# The suite runs in a worker process per logical CPU (pytest-xdist), a test file at a time, so
# that a module's fixtures (a tiny trained model) are built once.
test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -n logical --dist loadfile --durations=15

# AMD Quark, a rival in the ResNet-50 benchmark, pins older onnx and onnxruntime than this
# project: it gets a virtualenv of its own (benchmarks/quark_child.py runs in it).
QUARK_VENV := .venv-quark
$(QUARK_VENV)/.installed:
	$(PYTHON) -m venv $(QUARK_VENV)
	$(QUARK_VENV)/bin/pip install -q amd-quark==0.13 'onnxruntime<=1.28' torch==2.13.0
	touch $@

# Every benchmark (hours on 2 cores: the reference models are built first), then the README's
# results tables from their JSON. One benchmark: python -m benchmarks.NAME, then python -m benchmarks.readme.
# `make bench-quick`: every benchmark end to end on small sizes and the demo models, a check that
# each runs (the 3DGAN's takes 9 minutes on 2 cores); its files go to benchmarks/results/quick/.
BENCHMARKS := zoo openvino_activations amx_conv weight_formats smoothing_alpha div_to_mul resnet50 targets calibration_memory activation_dtype ort_fusions simulator calogan scale_out transformer_base translator translator_step step_attention translator_targets calogan_targets zoo_targets
bench: setup $(QUARK_VENV)/.installed
	$(BIN)/python -m models.translator build
	for name in $(BENCHMARKS); do $(BIN)/python -m benchmarks.$$name || exit 1; done
	$(BIN)/python -m benchmarks.readme

bench-quick: setup $(QUARK_VENV)/.installed
	$(BIN)/python -m models.resnet50 build --demo
	$(BIN)/python -m models.translator build --minutes 2
	for name in $(BENCHMARKS); do QUANTIZE_BENCH_QUICK=1 $(BIN)/python -m benchmarks.$$name || exit 1; done

# The reference translator: corpus from Debian catalogues, training (resumes; about 45 minutes
# on 2 cores), INT8, validation reports, then its benchmark against ORT's quantizers.
translator: setup
	$(BIN)/python -m models.translator build
	$(BIN)/python -m models.translator quantize --report translator-report
	$(BIN)/python -m benchmarks.translator

clean:
	rm -rf $(VENV) $(QUARK_VENV) *.egg-info resnet50.int8.onnx resnet50-report.html resnet50-report.json translator-report

"""`quantize MODEL --calib DATA -o OUT`: the command line over `quantize`."""

import argparse
import json
import sys
import warnings
from dataclasses import replace
from functools import partial
from pathlib import Path

from calibration import METHODS, ImagePreprocess, Percentile
from onnxio import InputError, save_model
from quantize.frontend import load_model
from quantize.recipe import PRESETS, Recipe, RunOptions, preset, preset_for
from quantize.runtime import RUNTIMES, openvino
from quantize.target import TARGETS, WEIGHT_FORMATS, host_target, saturates
from quantize.validate import OUTPUT_FLOOR_DB


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="quantize",
        description="Post-training INT8 quantization of an FP32 model for CPU inference with ONNX Runtime.",
    )
    p.add_argument(
        "model",
        type=Path,
        help=".onnx file, TensorFlow SavedModel directory, or Keras .keras/.h5 file",
    )
    p.add_argument(
        "--calib",
        required=True,
        help=".npy, .npz (keys = input names; or whole feeds, members INDEX/INPUT, for scalar and state inputs), .h5 (datasets = input names, or FILE.h5:DATASET), or a directory of images",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        help="INT8 ONNX model to write (default: MODEL.int8.onnx beside MODEL)",
    )
    p.add_argument(
        "--preset",
        choices=["auto", *PRESETS],
        default="auto",
        help="recipe: cnn (every op ORT runs in INT8), transformer (weight GEMMs in INT8, softmax, LayerNorm, residual "
        "Adds in FP32, SmoothQuant; a convolutional backbone before them as cnn), generator (output Conv FP32, the two before it widened: outputs spanning "
        "decades); auto picks transformer for graphs with attention, LayerNorm or embeddings, else cnn (default)",
    )
    p.add_argument(
        "--recipe-from",
        type=Path,
        metavar="INT8.onnx",
        help="the recipe a model quantize made carries, instead of a preset",
    )
    p.add_argument(
        "--method",
        choices=sorted(METHODS),
        help="activation range calibration (default: the recipe's, percentile)",
    )
    p.add_argument(
        "--percentile",
        type=float,
        help=f"for --method percentile (default: {Percentile().percent})",
    )
    p.add_argument(
        "--calib-samples",
        type=int,
        default=RunOptions.calib_samples,
        help="calibration samples at most (default: %(default)s)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=RunOptions.batch_size,
        help="calibration batch (default: %(default)s)",
    )
    p.add_argument(
        "--serve-batch",
        type=int,
        metavar="N",
        help="the batch the model will be served at: per-node kernel timing, the speed check and the "
        "report's throughput time INT8 against FP32 at it (default: --batch-size)",
    )
    p.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="NAME_OR_OP",
        help="node names or op types to keep in FP32",
    )
    p.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime intra-op threads (default: all cores)"
    )
    p.add_argument(
        "--target",
        choices=["auto", *TARGETS],
        help="the CPU's INT8 path to make the model for: avx2 (also AVX-512 without VNNI, whose kernels saturate "
        "on full-range int8 weights), vnni, amx; auto = this machine (default: the recipe's, auto)",
    )
    p.add_argument(
        "--weights",
        choices=["auto", *WEIGHT_FORMATS],
        help="weight format: int8 (full range; vnni and amx), paired (int8 whose pairs of products "
        "fit ONNX Runtime's int16 sums: exact and fast on avx2), int7 (int8 within +-64: exact on avx2 "
        "however a runtime pairs them), uint8 (all 8 bits, exact everywhere, ONNX Runtime's slower "
        "U8U8 kernels); depthwise Convs full range in all; auto = int8 for vnni and amx, and for avx2 "
        "paired (int7 in OpenVINO), or uint8 where that misses the accuracy goal and uint8 buys it "
        "(default: the recipe's, auto)",
    )
    p.add_argument(
        "--keep-low-fidelity",
        action="store_true",
        help=f"below {OUTPUT_FLOOR_DB:g} dB output SQNR, do not send the nodes that cost most back to FP32 "
        "(the default does, scored on held-out calibration samples)",
    )
    p.add_argument(
        "--no-kernel-timing",
        action="store_true",
        help="do not time INT8 against FP32 per Conv/GEMM on this CPU: every node the policy chose is INT8, and the "
        "model does not depend on this machine's timings",
    )
    p.add_argument(
        "--no-bias-correction",
        action="store_true",
        help="do not shift the INT8 Convs' biases by the mean error of their outputs (by default they are, "
        "if that raises the output SQNR on held-out samples)",
    )
    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        help="what the model will run in: the speed check and the report time it there; openvino "
        "(pip install openvino) also skips the per-node timing of ONNX Runtime's kernels "
        "(default: the recipe's, onnxruntime)",
    )
    images = p.add_argument_group(
        "image directory preprocessing (default: the model's stored recipe, else scale 1/255, RGB, the "
        "layout whose channel axis has 1 or 3 entries)"
    )
    images.add_argument(
        "--image-size", type=int, nargs="+", metavar="N", help="resize to N x N, or H W"
    )
    images.add_argument(
        "--scale", type=float, help="multiply pixel values by this first (e.g. 0.00392)"
    )
    images.add_argument(
        "--mean", type=float, nargs=3, help="per-channel mean subtracted after scaling"
    )
    images.add_argument("--std", type=float, nargs=3, help="per-channel std divided after the mean")
    images.add_argument("--layout", choices=["NHWC", "NCHW"])
    images.add_argument("--bgr", action="store_true", help="feed channels in BGR order")
    p.add_argument(
        "--report",
        type=Path,
        metavar="FILE.html",
        help="also measure throughput and write a validation report (HTML + JSON beside it)",
    )
    p.add_argument(
        "--evaluate", metavar="NAME", help="task metric for the report, e.g. resnet50 (top-1)"
    )
    p.add_argument(
        "--max-drop",
        type=float,
        metavar="X",
        help="send the nodes that cost most of the metric back to FP32 until INT8 is within X of "
        "FP32 (accuracy-driven fallback); the metric is --evaluate's, else the output cosine to FP32 "
        "on held-out calibration samples (FP32 scores 1: X=0.01 asks for 0.99)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the summary (or report) as JSON on stdout"
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.formatwarning = lambda message, *_, **__: f"quantize: warning: {message}\n"
    try:
        return run(args)
    except InputError as exc:
        print(f"quantize: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("quantize: interrupted; nothing written", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"quantize: internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} (rerun with --debug)",
            file=sys.stderr,
        )
        return 1


def run(args: argparse.Namespace) -> int:
    output = args.output or _default_output(args.model)
    _check_outputs(args, output)
    try:
        recipe, source = _recipe(args)
        recipe.resolved()  # a format the target would saturate on: one line now
        options = RunOptions(
            calib_samples=args.calib_samples,
            batch_size=args.batch_size,
            threads=args.threads,
            serve_batch=args.serve_batch,
            speed_check=True,
        )
        evaluator = None
        if args.max_drop is not None and args.max_drop < 0:
            raise ValueError(f"--max-drop {args.max_drop:g}: a drop is 0 or more")
        if recipe.runtime == "openvino":
            openvino()  # missing: one line now, not after calibration
        if args.evaluate:
            from quantize.evaluators import get_evaluator

            evaluator = get_evaluator(args.evaluate)
    except ValueError as exc:
        raise InputError("arguments", str(exc)) from None

    from quantize import report
    from quantize.pipeline import WHOLE_FP32, keep_fp32_unless_faster, quantize

    with _progress() as advance:
        result = quantize(args.model, args.calib, recipe, options, _image_preprocess(args), advance)
    if args.max_drop is not None and evaluator is None:
        from quantize.evaluators import OutputCosine

        evaluator = OutputCosine(
            result.fp32_model, result.held_out, result.options.threads, result.recipe.runtime
        )
    # quantize made the speed check before bias correction; a fallback lowers again and
    # keep_fp32_unless_faster times that model anew
    if not result.speed_check.endswith(WHOLE_FP32):  # else no INT8 is left to bring to a goal
        result = keep_fp32_unless_faster(_to_accuracy_goal(result, recipe, args, evaluator))
    if result.speed_check.endswith(WHOLE_FP32):
        print(f"quantize: warning: {result.speed_check}", file=sys.stderr)
    save_model(result.model, output)
    summary = report.summarize(result)
    summary["output"], summary["preset"] = str(output), source
    if args.report is not None:
        summary = report.evaluate(summary, result, evaluator)
        report.write(summary, args.report)
    if summary["fidelity"]["verdict"] == "low":
        print(f"quantize: warning: low fidelity: {summary['fidelity']['advice']}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2, default=float))
    else:
        _print_summary(summary, args.report)
    return 0


def _recipe(args: argparse.Namespace) -> tuple[Recipe, str]:
    """The recipe the options ask for, and where it came from (a preset's name or a model)."""
    if args.recipe_from is not None:
        recipe, source = _carried_recipe(args.recipe_from), f"from {args.recipe_from}"
    else:
        model = load_model(args.model)
        source = preset_for(model) if args.preset == "auto" else args.preset
        recipe = preset(source, model)
    changes = {}
    if args.method is not None or args.percentile is not None:
        method = args.method or "percentile"
        changes["ranges"] = (
            Percentile(args.percentile or Percentile().percent)
            if method == "percentile"
            else METHODS[method]()
        )
    if args.exclude:
        changes["overrides"] = replace(
            recipe.overrides, fp32=(*recipe.overrides.fp32, *args.exclude)
        )
    if args.target is not None:
        changes["target"] = args.target
    if args.weights is not None:
        changes["weights"] = args.weights
    if args.no_kernel_timing:
        changes["kernel_timing"] = False
    if args.no_bias_correction:
        changes["bias_correction"] = False
    if args.runtime is not None:
        changes["runtime"] = args.runtime
    return replace(recipe, **changes), source


def _carried_recipe(path: Path) -> Recipe:
    try:
        return Recipe.from_model(load_model(path))
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def _accuracy_goal(args: argparse.Namespace, evaluator, fp32_model):
    """A result -> the Fallback that brings it to the goal: the metric within --max-drop of
    FP32's, or else the output SQNR floor (only measured with --keep-low-fidelity)."""
    from quantize.fallback import fall_back, to_fidelity_floor

    if args.max_drop is None:
        return (
            partial(to_fidelity_floor, max_nodes=0) if args.keep_low_fidelity else to_fidelity_floor
        )
    sign = 1 if evaluator.higher_is_better else -1

    def score(model):
        return sign * evaluator.evaluate(model)

    return partial(fall_back, score=score, target=score(fp32_model) - args.max_drop)


def _say_what_fell_back(found, args: argparse.Namespace, evaluator) -> None:
    if args.max_drop is not None:
        if not found.met:
            print(
                f"quantize: warning: {evaluator.metric} still drops by more than {args.max_drop} with "
                f"{len(found.fp32_nodes)} nodes back in FP32; writing the best model found",
                file=sys.stderr,
            )
    elif found.score_before < found.target and not args.keep_low_fidelity:
        groups = found.result.group_cost
        print(
            f"quantize: output SQNR {found.score_before:.1f} dB was below the {OUTPUT_FLOOR_DB:g} dB floor: "
            f"{len(found.fp32_nodes)} node(s) back to FP32 ({', '.join(found.fp32_nodes) or 'none taken'}), "
            f"now {found.score_after:.1f} dB" + (f"; {groups}" if groups else ""),
            file=sys.stderr,
        )


def _to_accuracy_goal(result, recipe: Recipe, args: argparse.Namespace, evaluator):
    """`result` brought to the accuracy goal the options set (`_accuracy_goal`), its weight
    format chosen first where `recipe` leaves it to the tool and the target saturates."""
    goal = _accuracy_goal(args, evaluator, result.fp32_model)
    if recipe.weights == "auto" and saturates(result.recipe.target):
        from quantize.weight_choice import choose_weights

        found = choose_weights(result, goal)
        print(
            f"quantize: {found.result.recipe.weights} weights: {found.result.weight_choice}",
            file=sys.stderr,
        )
    else:
        found = goal(result)
    _say_what_fell_back(found, args, evaluator)
    return found.result


def _default_output(model: Path) -> Path:
    return model.parent / f"{model.stem if model.is_file() else model.name}.int8.onnx"


def _check_outputs(args: argparse.Namespace, output: Path) -> None:
    """No output may overwrite an input or another output."""
    calib = Path(
        args.calib
        if Path(args.calib).exists() or ":" not in args.calib
        else args.calib.rsplit(":", 1)[0]
    )
    inputs = {"the input model": args.model, "the calibration data": calib}
    outputs = {"the INT8 model": output}
    if args.report is not None:
        outputs.update(
            {"the report": args.report, "the report's JSON": args.report.with_suffix(".json")}
        )
    for what, path in outputs.items():
        _check_output(path)
        for other, taken in [*inputs.items(), *((o, p) for o, p in outputs.items() if o != what)]:
            if path.resolve() == taken.resolve():
                raise InputError(path, f"{what} would be written over {other}; choose another path")


def _check_output(output: Path) -> None:
    if not output.parent.is_dir():
        raise InputError(output, f"output directory {output.parent} does not exist")
    if output.is_dir():
        raise InputError(output, "output path is a directory; give a file name")


def _image_preprocess(args) -> ImagePreprocess | None:
    given = [args.image_size, args.scale, args.mean, args.std, args.layout, args.bgr or None]
    if all(v is None for v in given):
        return None
    size = None
    if args.image_size:
        size = (args.image_size[0], args.image_size[-1])
    default = ImagePreprocess()
    return ImagePreprocess(
        size=size,
        scale=args.scale if args.scale is not None else default.scale,
        mean=tuple(args.mean or default.mean),
        std=tuple(args.std or default.std),
        layout=args.layout,
        color="BGR" if args.bgr else "RGB",
    )


class _progress:
    """A rich progress bar over calibration samples (silent when stderr is not a terminal)."""

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        console = Console(stderr=True, markup=False)
        self.bar = Progress(
            "calibrating",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
            disable=not console.is_terminal,
            transient=True,
        )
        self.bar.__enter__()
        self.task = self.bar.add_task("calibrating", total=None)
        return lambda done, total: self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)


def _print_summary(s: dict, report_path: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from quantize.report import weights_text

    console = Console(markup=False)  # tensor names may hold brackets
    ops = Table(title="Ops by precision")
    for column in ("op type", "INT8", "FP32"):
        ops.add_column(column, justify="left" if column == "op type" else "right")
    for op, counts in s["coverage"]["by_op_type"].items():
        ops.add_row(op, str(counts["int8"]), str(counts["fp32"]))
    console.print(ops)
    facts = Table(show_header=False, title="Summary")
    size = s["size_bytes"]
    facts.add_row("output", s["output"])
    facts.add_row("preset", s["preset"])
    facts.add_row("size", f"{size['fp32'] / 1e6:.2f} MB -> {size['int8'] / 1e6:.2f} MB")
    recipe = s["recipe"]
    facts.add_row("target", f"{recipe['target']} (this CPU: {host_target()})")
    facts.add_row("weights", weights_text(s["weights"]))
    facts.add_row("kernel timing", s["kernel_timing"])
    facts.add_row("speed check", s["speed_check"])
    facts.add_row("bias correction", s["bias_correction"])
    facts.add_row("smoothing", s["smoothing"])
    if s["group_cost"]:
        facts.add_row("fallback group cost", s["group_cost"])
    facts.add_row(
        "calibration",
        f"{s['calibration']['samples']} samples, {s['calibration']['seconds']:.1f} s, method {recipe['ranges']['name']}",
    )
    for name, db in s["output_sqnr_db"].items():
        facts.add_row(f"output SQNR {name}", f"{db:.1f} dB on {s['sqnr_samples']}")
    if "throughput" in s:
        t = s["throughput"]
        facts.add_row(
            "throughput",
            f"{t['fp32']['throughput']:.1f} -> {t['int8']['throughput']:.1f} samples/s ({t['speedup']:.2f}x, batch {t['int8']['batch']})",
        )
    if s.get("openvino"):
        facts.add_row("OpenVINO", s["openvino"]["advice"])
    if "metric" in s:
        m = s["metric"]
        facts.add_row(m["name"], f"{m['fp32']:.2f} -> {m['int8']:.2f} (drop {m['drop']:.2f})")
    if report_path is not None:
        facts.add_row("report", f"{report_path} (+ {report_path.with_suffix('.json').name})")
    console.print(facts)
    left = s["coverage"]["fp32_nodes"]
    if left:
        console.print(
            f"{len(left)} node(s) left in FP32; see --json or the report for each reason."
        )

"""`python -m models.translator build | quantize | translate [FILE] | bleu`.

translate: one English sentence per line (FILE or stdin, UTF-8) -> one German line per input
line, in order, through the bin-packing batcher. With -o OUT the file is translated in shards
kept in OUT.shards/ (resumed when the command is rerun), on this machine's streams or with
--ray on a Ray cluster, and joined into OUT. Empty lines give empty lines; sentences over
the model's `max_len` tokens are truncated (counted on stderr); bytes that are not UTF-8 are
an error naming the file and line.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from calibration import METHODS
from models.translator.production import SHARD_LINES, CorpusJob
from models.translator.translate import Translator, TranslatorFiles, default_folder
from onnxio import InputError, write_text
from quantize.batcher import BatcherConfig, run_packed
from quantize.ray_pool import pool_factory
from quantize.recipe import Recipe
from quantize.shards import run_job


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m models.translator")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build", help="corpus, tokenizer, training (resumes) and ONNX export into the cache"
    )
    b.add_argument(
        "--minutes", type=float, default=float("inf"), help="training budget for this run"
    )
    q = sub.add_parser(
        "quantize", help="INT8 encoder and decoder, calibrated on dev-split sentences"
    )
    q.add_argument("--method", choices=sorted(METHODS), default=Recipe.transformer().ranges.name)
    q.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write encoder/decoder validation reports (BLEU FP32 vs INT8, per-layer SQNR)",
    )
    t = sub.add_parser("translate", help="translate lines of English")
    t.add_argument(
        "input",
        nargs="?",
        default="-",
        help="a UTF-8 text file, one sentence per line (default stdin)",
    )
    t.add_argument("--int8", action="store_true", help="use the INT8 graphs")
    t.add_argument("--beam", type=_at_least_one, default=1)
    t.add_argument(
        "--streams",
        type=_at_least_one,
        default=1,
        help="parallel inference instances, each pinned to its own cores",
    )
    t.add_argument("--token-budget", type=_at_least_one, default=BatcherConfig.token_budget)
    t.add_argument(
        "-o",
        "--output",
        type=Path,
        help="write here instead of stdout, in resumable shards (OUT.shards/)",
    )
    t.add_argument(
        "--shard-lines", type=_at_least_one, default=SHARD_LINES, help="default %(default)s"
    )
    t.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="with -o: run the shards on a Ray cluster (ADDRESS, 'auto', or none: a Ray started here)",
    )
    args = parser.parse_args()
    if args.command == "translate" and args.ray and not args.output:
        parser.error("--ray needs -o OUT: the shards are written next to it")
    if args.command == "translate" and args.streams > len(os.sched_getaffinity(0)):
        parser.error(
            f"--streams {args.streams}: this machine gives the process {len(os.sched_getaffinity(0))} cores, one stream needs one"
        )
    try:
        if args.command == "build":
            from models.translator.build import build  # TensorFlow, only where it is needed

            files = build(args.minutes)
            print(f"translator ready: {files.encoder.parent}")
        elif args.command == "quantize":
            from models.translator.build import quantize_translator

            int8, results = quantize_translator(
                TranslatorFiles.in_folder(default_folder()),
                Recipe.transformer(ranges=METHODS[args.method]()),
            )
            print(
                json.dumps(
                    {
                        g: {"model": str(getattr(int8, g)), "output_sqnr_db": r.output_sqnr_db}
                        for g, r in results.items()
                    },
                    indent=2,
                )
            )
            if args.report is not None:
                _write_reports(results, args.report)
        else:
            return _translate(args)
    except InputError as exc:
        print(f"python -m models.translator: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def _translate(args) -> int:
    lines = read_lines(args.input)
    files = TranslatorFiles.in_folder(default_folder(), ".int8" if args.int8 else "")
    for path in (files.encoder, files.decoder):
        if not path.exists():
            raise InputError(
                path,
                "not built: run `python -m models.translator build` (and `quantize` for --int8)",
            )
    probe = Translator(files, threads=1)
    if args.output:
        _translate_to_file(args, lines, files)
    else:
        _translate_to_stdout(args, lines, files, probe)
    truncated = probe.truncated(lines)
    if truncated:
        print(
            f"note: {truncated} sentence(s) longer than {probe.max_len} tokens were truncated",
            file=sys.stderr,
        )
    return 0


def _translate_to_stdout(args, lines: list[str], files: TranslatorFiles, probe) -> None:
    config = BatcherConfig(token_budget=args.token_budget, streams=args.streams)
    for line in run_packed(
        lines,
        probe.token_lengths(lines),
        lambda threads: Translator(files, threads, args.beam),
        config,
    ):
        print(line)


def _translate_to_file(args, lines: list[str], files: TranslatorFiles) -> None:
    if not lines:
        write_text(args.output, "")
        return
    if args.input == "-":
        raise InputError(
            Path("-"), "-o translates a file in resumable shards: give FILE, not stdin"
        )
    job = CorpusJob.of(
        Path(args.input), len(lines), files, args.beam, args.token_budget, args.shard_lines
    )
    sharded = job.sharded(args.output.with_name(args.output.name + ".shards"))
    try:
        ran, manifest = run_job(sharded, job.make_writer, pool_factory(args.ray, args.streams))
    except RuntimeError as exc:  # a shard that failed, named with its lines
        raise InputError(Path(args.input), f"translation stopped: {exc}") from None
    job.join(sharded, args.output)
    print(
        f"{args.output}: {len(lines)} lines in {len(manifest['shards'])} shards, "
        f"{len(ran)} translated now",
        file=sys.stderr,
    )


def _write_reports(results: dict, folder: Path) -> None:
    """One core validation report per graph, BLEU measured with only that graph in INT8."""
    from models.translator.evaluate import BleuEvaluator
    from quantize import report

    folder.mkdir(parents=True, exist_ok=True)
    for graph, result in results.items():
        summary = report.evaluate(report.summarize(result), result, BleuEvaluator(graph))
        print(
            f"{graph}: BLEU {summary['metric']['fp32']:.2f} -> {summary['metric']['int8']:.2f}; report {report.write(summary, folder / f'{graph}-report.html')}"
        )


def read_lines(source: str) -> list[str]:
    raw = sys.stdin.buffer.read() if source == "-" else _read_file(Path(source))
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as exc:
            raise InputError(
                Path(source),
                f"line {number} is not UTF-8 (byte {exc.start + 1}: {line[exc.start : exc.start + 1]!r})",
            ) from None
    return out


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, exc.strerror or "cannot be read") from None


if __name__ == "__main__":
    sys.exit(main())

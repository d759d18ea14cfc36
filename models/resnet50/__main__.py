"""`python -m models.resnet50 build|evaluate MODEL.onnx`."""

import argparse

from models.resnet50.build import DEMO, TrainRecipe, build
from models.resnet50.evaluate import top1_of_file


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m models.resnet50")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser(
        "build", help="train on Fashion-MNIST and export ONNX into the cache (reused if present)"
    )
    build_cmd.add_argument(
        "--demo",
        action="store_true",
        help=f"the demo's model: {DEMO.epochs} epoch on up to {DEMO.train_samples} images (as "
        f"many as this CPU trains in {DEMO.minutes:g} minutes) instead of {TrainRecipe.epochs} "
        f"on {TrainRecipe.train_samples}, cached apart from the reference",
    )
    evaluate = sub.add_parser("evaluate", help="top-1 of an ONNX model on the 10k test images")
    evaluate.add_argument("model")
    args = parser.parse_args()
    if args.command == "build":
        build(DEMO if args.demo else TrainRecipe())
    else:
        print(f"top-1 {100 * top1_of_file(args.model):.2f} %")


if __name__ == "__main__":
    main()

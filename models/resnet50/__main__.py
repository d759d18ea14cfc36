"""`python -m models.resnet50 build|evaluate MODEL.onnx`."""

import argparse

from models.resnet50.build import TrainRecipe, build
from models.resnet50.evaluate import top1_of_file


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m models.resnet50")
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser(
        "build", help="train on Fashion-MNIST and export ONNX into the cache (reused if present)"
    )
    build_cmd.add_argument(
        "--epochs",
        type=int,
        default=TrainRecipe.epochs,
        help="training epochs (default: %(default)s)",
    )
    evaluate = sub.add_parser("evaluate", help="top-1 of an ONNX model on the 10k test images")
    evaluate.add_argument("model")
    args = parser.parse_args()
    if args.command == "build":
        if args.epochs < 1:
            parser.error("--epochs must be at least 1")
        build(TrainRecipe(epochs=args.epochs))
    else:
        print(f"top-1 {100 * top1_of_file(args.model):.2f} %")


if __name__ == "__main__":
    main()

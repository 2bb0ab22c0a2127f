"""The command-line arguments of `launch export k8s` and the ExportOptions they make."""

from __future__ import annotations

import argparse

from launcher.k8s.layout import DEFAULT_PORT, FORMATS, MOUNT_PATH, ExportOptions

__all__ = ["add_export_arguments", "export_options"]


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", required=True, help="container image with the project and TensorFlow (docker/)")
    parser.add_argument("--format", default="jobset", help=f"{' or '.join(FORMATS)} (default: jobset)")
    parser.add_argument("-o", "--output", metavar="DIR", help="write one YAML file per object here (default: stdout)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TF port in every pod (default {DEFAULT_PORT})")
    parser.add_argument(
        "--checkpoint-claim",
        metavar="NAME",
        help=f"a ReadWriteMany PersistentVolumeClaim mounted at {MOUNT_PATH} in every pod: the run directory and the "
        "checkpoints (unless checkpoint_dir is an object-store URL)",
    )
    parser.add_argument("--claim-size", metavar="SIZE", help="also write that claim, of this size (e.g. 100Gi)")
    parser.add_argument("--storage-class", metavar="CLASS", help="storage class of the claim written")
    parser.add_argument(
        "--secret",
        metavar="NAME",
        help="a Secret holding the spec's secret-looking env values under the same keys; they are referenced, never "
        "written",
    )


def export_options(args: argparse.Namespace) -> ExportOptions:
    return ExportOptions(
        image=args.image,
        format=args.format,
        name=args.name,
        port=args.port,
        checkpoint_claim=args.checkpoint_claim,
        claim_size=args.claim_size,
        storage_class=args.storage_class,
        secret=args.secret,
    )

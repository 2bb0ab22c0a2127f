"""The command-line arguments of `launch export k8s` and the ExportOptions they make.

Only parses: KEY=VALUE pairs and tolerations become typed values here (a malformed one is a
UsageError naming the flag); whether each is one Kubernetes accepts is `ExportOptions.check`'s.
"""

from __future__ import annotations

import argparse

from launcher.k8s.layout import DEFAULT_PORT, FORMATS, MOUNT_PATH, ExportOptions
from launcher.k8s.names import EFFECTS, parse_pairs, parse_toleration

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
        "checkpoints (unless checkpoint_dir is an object-store URL); without it the run directory is lost with "
        "each pod",
    )
    parser.add_argument("--claim-size", metavar="SIZE", help="also write that claim, of this size (e.g. 100Gi)")
    parser.add_argument("--storage-class", metavar="CLASS", help="storage class of the claim written")
    parser.add_argument(
        "--secret",
        metavar="NAME",
        help="a Secret holding the spec's secret-looking env values under the same keys; they are referenced, never "
        "written",
    )
    parser.add_argument("--namespace", metavar="NS", help="namespace of every object (default: kubectl's)")
    parser.add_argument(
        "--label",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a label on every object written, repeatable (Kueue: --label kueue.x-k8s.io/queue-name=QUEUE)",
    )
    parser.add_argument(
        "--node-selector",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a node label every pod requires, repeatable (e.g. cloud.google.com/gke-accelerator=nvidia-l4)",
    )
    parser.add_argument(
        "--toleration",
        metavar="KEY[=VALUE][:EFFECT]",
        action="append",
        default=[],
        help=f"a taint every pod tolerates, repeatable; EFFECT is {', '.join(EFFECTS)} or, left out, any "
        "(e.g. nvidia.com/gpu:NoSchedule)",
    )
    parser.add_argument("--cpu", metavar="CPU", help="CPU request of every pod (e.g. 8, 500m)")
    parser.add_argument("--memory", metavar="SIZE", help="memory request of every pod (e.g. 32Gi)")
    parser.add_argument(
        "--network-policy",
        action="store_true",
        help="also write a NetworkPolicy: the TF port (which has no authentication) admits only the job's own pods",
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
        namespace=args.namespace,
        labels=parse_pairs("--label", args.label),
        node_selector=parse_pairs("--node-selector", args.node_selector),
        tolerations=tuple(parse_toleration(text) for text in args.toleration),
        cpu=args.cpu,
        memory=args.memory,
        network_policy=args.network_policy,
    )

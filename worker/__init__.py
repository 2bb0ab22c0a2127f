"""Worker runtime: TF_CONFIG -> MultiWorkerMirroredStrategy -> training -> checkpoints/results.

Importing this package does not import TensorFlow; `worker.events.report` is safe to use from
any user script.
"""

from worker.events import report

__all__ = ["report"]

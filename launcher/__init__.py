"""Launch and supervise TensorFlow MultiWorkerMirroredStrategy jobs (never imports TensorFlow)."""

__version__ = "0.1.0"

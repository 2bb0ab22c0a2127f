"""Checks made before anything starts: every host through its agent (python, TensorFlow, GPUs, disk),
and this machine's ports. It reports problems; it never starts a task."""

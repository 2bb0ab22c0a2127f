"""A module a test spare preloads instead of TensorFlow: importing it is all it does."""

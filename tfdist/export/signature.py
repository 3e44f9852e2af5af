"""The names an export is served by, in one place (pure: no TensorFlow)."""

#: The SavedModel tag set servers load (TensorFlow Serving, ``saved_model_cli --tag_set serve``).
TAG = "serve"
#: Where Keras' ExportArchive registers the serving function.
ENDPOINT = "serve"
#: The signature servers call by default (``saved_model_cli --signature_def serving_default``).
SIGNATURE = "serving_default"

"""tinyplug-viz-web: records graph rewrites, kernels and profile spans to a trace folder and shows them.

Importing the package costs nothing; the recorder, the server and the text viewer are separate modules."""

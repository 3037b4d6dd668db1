"""tinyplug's test kit for backends and plugins, shipped with the package.

Run the op suite (every Tensor op against PyTorch, forward and backward) on a device:

    TINYPLUG_TEST_DEVICES=MYDEV python -m pytest --pyargs tinyplug.testing -p no:cacheprovider

(without TINYPLUG_TEST_DEVICES it runs on every available device). It needs pytest and torch
(`pip install 'tinyplug[testing]'`). Tests of a dtype the device's renderer lacks (`supported_dtypes()`) are skipped.

- `tinyplug.testing.helpers_ops.check_op`: one op in tinyplug and in PyTorch, outputs and gradients compared.
- `tinyplug.testing.plugins`: fake installed distributions (`plugin_site` fixture, `make_dist`, `plugin_module`) to
  test a plugin's registration through real entry points.
- `tinyplug.testing.conftest`: the `device` fixture; a plugin's own conftest may import it
  (`from tinyplug.testing.conftest import device`)."""

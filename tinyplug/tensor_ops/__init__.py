"""The operations of Tensor, one mixin per job; tinyplug/tensor.py puts them together."""

"""The IR: UOp nodes, dtypes, patterns and the rewrite engine."""
from tinyplug.uop.dtype import DType, PtrDType, dtypes, least_upper_dtype, to_dtype
from tinyplug.uop.ops import Ops, GroupOp, UOp
from tinyplug.uop.upat import UPat, PatternMatcher
from tinyplug.uop.rewrite import graph_rewrite, graph_rewrite_map
from tinyplug.uop.sidetable import NodeField, UOpMap

__all__ = ["DType", "PtrDType", "dtypes", "least_upper_dtype", "to_dtype", "Ops", "GroupOp", "UOp", "UPat", "PatternMatcher",
           "graph_rewrite", "graph_rewrite_map", "NodeField", "UOpMap"]

"""einsum and diagonals: index-notation products written as movement ops, one broadcast multiply and one sum."""
from __future__ import annotations
from tinyplug.tensor_ops import graph

# labels standing for the dims an operand's '...' covers (never letters a formula can use)
_ELLIPSIS_LABELS = tuple(chr(0x3B1 + i) for i in range(24))

def _parse(formula: str, ndims: list[int]) -> tuple[list[list[str]], list[str]]:
  """Each operand's labels (one per dim, '...' expanded right-aligned) and the output's labels."""
  formula = formula.replace(" ", "")
  lhs, arrow, rhs = formula.partition("->")
  terms = lhs.split(",")
  if len(terms) != len(ndims):
    raise RuntimeError(f"einsum: the formula {formula!r} has {len(terms)} operands, but {len(ndims)} were given")
  ell = 0
  for term, nd in zip(terms, ndims):
    if term.count("...") > 1: raise RuntimeError(f"einsum: operand {term!r} has more than one '...'")
    named = len(term.replace("...", ""))
    if not all(c.isalpha() for c in term.replace("...", "")):
      raise RuntimeError(f"einsum: operand {term!r} may only hold letters and one '...'")
    if ("..." in term and named > nd) or ("..." not in term and named != nd):
      raise RuntimeError(f"einsum: operand {term!r} names {named} dims, but the tensor has {nd}")
    if "..." in term: ell = max(ell, nd - named)
  def expand(term: str, nd: int) -> list[str]:
    before, dots, after = term.partition("...")
    n = nd - len(before) - len(after) if dots else 0
    return list(before) + list(_ELLIPSIS_LABELS[ell - n:ell]) + list(after)
  labels = [expand(t, nd) for t, nd in zip(terms, ndims)]
  if arrow:
    if rhs.count("...") > 1: raise RuntimeError("einsum: the output has more than one '...'")
    out = expand(rhs, len(rhs.replace("...", "")) + ell)
  else:
    counts: dict[str, int] = {}
    for ls in labels:
      for c in ls: counts[c] = counts.get(c, 0) + 1
    out = list(_ELLIPSIS_LABELS[:ell]) + sorted(c for c, k in counts.items() if k == 1 and c not in _ELLIPSIS_LABELS)
  seen = {c for ls in labels for c in ls}
  if (bad := [c for c in out if c not in seen]): raise RuntimeError(f"einsum: output label {bad[0]!r} is on no operand")
  if len(set(out)) != len(out): raise RuntimeError(f"einsum: the output {rhs!r} repeats a label")
  return labels, out

class EinsumMixin:
  __slots__ = ()
  @classmethod
  def einsum(cls, formula: str, *operands, dtype=None):
    """Sums of products over the labels of `formula`, as torch.einsum/numpy.einsum ("ij,jk->ik", "...ii->...i",
    implicit output: the labels that appear once, sorted). Operands may also be given as one list."""
    ts = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    labels, out = _parse(formula, [t.ndim for t in ts])
    # a label repeated within one operand takes its diagonal
    for n, ls in enumerate(labels):
      while len(set(ls)) != len(ls):
        c = next(c for c in ls if ls.count(c) > 1)
        p, q = ls.index(c), ls.index(c, ls.index(c) + 1)
        ts[n] = ts[n].diagonal(dim1=p, dim2=q)
        labels[n] = [x for i, x in enumerate(ls) if i not in (p, q)] + [c]
        ls = labels[n]
    sizes: dict[str, int] = {}
    for t, ls in zip(ts, labels):
      for c, s in zip(ls, t.shape):
        if c in sizes and sizes[c] != s:
          # the dims under '...' broadcast against each other; a named label must match exactly
          if c not in _ELLIPSIS_LABELS or 1 not in (sizes[c], s):
            raise RuntimeError(f"einsum: label {c!r} has size {sizes[c]} in one operand and {s} in another")
          s = max(s, sizes[c])
        sizes[c] = s
    summed = sorted(c for c in sizes if c not in out)
    order = out + summed
    product = None
    for t, ls in zip(ts, labels):
      perm = tuple(sorted(range(len(ls)), key=lambda i: order.index(ls[i])))
      t = t.permute(perm)
      own = {ls[i]: t.shape[k] for k, i in enumerate(perm)}
      t = t.reshape(tuple(own.get(c, 1) for c in order)).expand(tuple(sizes[c] for c in order))
      product = t if product is None else product * t
    if summed: product = product.sum(tuple(range(len(out), len(order))), dtype=dtype)
    elif dtype is not None: product = product.cast(dtype)
    return product

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """The diagonal over dims dim1 and dim2 (shifted by `offset`), as a new last dim; the two dims are removed."""
    d1, d2 = graph.normalize_axis(dim1, self.ndim), graph.normalize_axis(dim2, self.ndim)
    if d1 == d2: raise RuntimeError(f"diagonal: dim1 and dim2 are the same dim ({dim1}, {dim2})")
    rest = [i for i in range(self.ndim) if i not in (d1, d2)]
    x = self.permute(tuple(rest) + (d1, d2))
    a, b = x.shape[-2:]
    lead = x.shape[:-2]
    keep = tuple((0, s) for s in lead)
    rows, cols = (0, a), (0, b)
    if offset >= 0: cols = (min(offset, b), b)
    else: rows = (min(-offset, a), a)
    n = max(0, min(rows[1] - rows[0], cols[1] - cols[0]))
    x = x.shrink(keep + ((rows[0], rows[0] + n), (cols[0], cols[0] + n)))
    if n == 0: return x.reshape(lead + (0,))
    # row-major n*n: the diagonal is every (n+1)-th element
    x = x.reshape(lead + (n * n,)).pad(((0, 0),) * len(lead) + ((0, n),)).reshape(lead + (n, n + 1))
    return x.shrink(keep + ((0, n), (0, 1))).reshape(lead + (n,))

  def diag(self):
    """A 1-D tensor as the diagonal of a square matrix (zeros elsewhere)."""
    if self.ndim != 1: raise ValueError(f"diag needs a 1-D tensor, got shape {self.shape}")
    n = self.shape[0]
    return self.reshape(n, 1).pad(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)

"""The units of a step, one class per layer kind: which weights a unit owns (by name)
and its forward, input-gradient and weight-gradient maths (``units.py``'s pieces).

A step (``tp_step.py``, ``sp_step.py``) runs, per micro-batch: the embedding, then
the ``attn`` and ``mlp`` sub-layer of every block, then the ``head`` (final norm,
vocab-parallel LM head, cross-entropy). A sub-layer is

    h ─ norm ─ n ─ core ─ a (partial sums over ranks) ─ collective ─ y ;  h_next = h + y

and :class:`Layer` is what varies between kinds: the core's forward (the
column-parallel ``w_in`` ... row-parallel ``w_out``), its backward to the input
gradient (a partial sum), its weight gradients, and the widths of what the weight
gradient keeps (``x``: ``w_out``'s input, ``dy``: the gradient at ``w_in``'s output).

Adding a layer kind = one subclass of :class:`Layer` with a new ``kind``, registered in
:data:`LAYER_KINDS`, and a model whose blocks name it (:func:`units_of`). The core
functions are static (pure functions of tensors, weights as arguments) so the step's
segments can call them eagerly, under ``torch.compile`` and inside CUDA graphs; the
segments look a kind up by its name (``LAYER_KINDS[kind]``), a constant under compile.
"""

from __future__ import annotations

from typing import ClassVar

from domino_prof.errors import ConfigError
from domino_prof.reference_model import units as U
from domino_prof.reference_model.model import Transformer


class Unit:
    """One unit of the step: ``index`` in the step's unit list, its weights (resolved
    once, by name, on the sharded model) and its profiler range names."""

    kind: ClassVar[str]
    weight_names: ClassVar[tuple[str, ...]]  # formatted with the block index {i}

    def __init__(self, model: Transformer, *, index: int, layer: int = -1) -> None:
        self.index, self.layer = index, layer
        self.weights = tuple(model.get_parameter(n.format(i=layer)) for n in self.weight_names)

    def range_name(self, phase: str, b: int) -> str:
        return f"{phase}.layer_{self.kind}_{self.layer}_batch_{b}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.index}, layer {self.layer})"


class Embedding(Unit):
    kind = "embedding"
    weight_names = ("tok_embeddings.weight",)

    def range_name(self, phase: str, b: int) -> str:
        return f"{phase}.embedding_batch_{b}"


class Head(Unit):
    """Final norm + vocab-parallel LM head + cross-entropy (``units.head_*``)."""

    kind = "head"
    weight_names = ("norm.weight", "output.weight")

    def range_name(self, phase: str, b: int) -> str:
        return f"{phase}.head_batch_{b}"


class Layer(Unit):
    """A norm + core sub-layer. ``weights`` = (norm, w_in, w_out)."""

    @staticmethod
    def x_width(dims: U.Dims) -> int:
        """Columns of ``x`` (w_out's input, kept for the weight gradient)."""
        raise NotImplementedError

    @staticmethod
    def dy_width(dims: U.Dims) -> int:
        """Columns of ``dy`` (the gradient at w_in's output, kept for the weight gradient)."""
        raise NotImplementedError

    @staticmethod
    def core_fwd(n, w_in, w_out, rope, b: int, dims: U.Dims, x_out=None):
        """n: [T, d] -> (a [T, d] partial over ranks, saved, x [T, x_width])."""
        raise NotImplementedError

    @staticmethod
    def core_dgrad(g, saved, w_in, w_out, rope_conj, b: int, dims: U.Dims, dy_out=None):
        """g: [T, d] -> (dn [T, d] partial over ranks, dy, x)."""
        raise NotImplementedError

    @staticmethod
    def wgrad(g, dy, x, n, w_in_grad, w_out_grad, first: bool) -> None:
        raise NotImplementedError


class Attention(Layer):
    kind = "attn"
    weight_names = (
        "layers.{i}.attention_norm.weight",
        "layers.{i}.attention.wqkv.weight",
        "layers.{i}.attention.wo.weight",
    )

    @staticmethod
    def x_width(dims):
        return dims.heads * dims.head_dim  # o2: [T, Hl·D]

    @staticmethod
    def dy_width(dims):
        return (dims.heads + 2 * dims.kv_heads) * dims.head_dim  # dqkv: [T, (Hl + 2Kl)·D]

    @staticmethod
    def core_fwd(n, w_in, w_out, rope, b, dims, x_out=None):
        a, saved = U.attn_fwd(n, w_in, w_out, rope, b, dims, o2_out=x_out)
        return a, saved, saved[4]  # saved[4] = o2: wo's input

    @staticmethod
    def core_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dy_out=None):
        return U.attn_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dqkv_out=dy_out)

    wgrad = staticmethod(U.attn_wgrad)


class MLP(Layer):
    kind = "mlp"
    weight_names = (
        "layers.{i}.ffn_norm.weight",
        "layers.{i}.feed_forward.w13.weight",
        "layers.{i}.feed_forward.w2.weight",
    )

    @staticmethod
    def x_width(dims):
        return dims.ffn  # p: [T, Fl]

    @staticmethod
    def dy_width(dims):
        return 2 * dims.ffn  # dgu: [T, 2Fl]

    @staticmethod
    def core_fwd(n, w_in, w_out, rope, b, dims, x_out=None):
        a, saved = U.mlp_fwd(n, w_in, w_out, dims, p_out=x_out)
        return a, saved, saved[2]  # saved[2] = p: w2's input

    @staticmethod
    def core_dgrad(g, saved, w_in, w_out, rope_conj, b, dims, dy_out=None):
        return U.mlp_dgrad(g, saved, w_in, w_out, dims, dgu_out=dy_out)

    wgrad = staticmethod(U.mlp_wgrad)


LAYER_KINDS: dict[str, type[Layer]] = {"attn": Attention, "mlp": MLP}
BLOCK_KINDS = ("attn", "mlp")  # the sub-layers of model.Block, in order


def layer_kind(kind: str) -> type[Layer]:
    if kind not in LAYER_KINDS:
        raise ConfigError(f"unknown layer kind {kind!r}; known: {', '.join(LAYER_KINDS)}")
    return LAYER_KINDS[kind]


def units_of(model: Transformer, block_kinds=BLOCK_KINDS) -> tuple[list[Layer], Head]:
    """The step's sub-layers in order (``index`` 0, 1, ...) and the head (index last + 1).
    An unknown kind is refused here, when the step is built."""
    classes = [layer_kind(k) for k in block_kinds]
    layers = []
    for i in range(len(model.layers)):
        for cls in classes:
            layers.append(cls(model, index=len(layers), layer=i))
    return layers, Head(model, index=len(layers))

"""`torch.compile(model, backend="lazymlir")`: Dynamo + AOTAutograd in front of the same pipeline.

Dynamo captures the program once and replays it, so a compiled step pays no
per-op tracing. AOTAutograd functionalizes the captured forward and backward
(input mutations, views, aliased inputs as synthetic bases) and decomposes with
the table torch-mlir's FX path uses; each resulting graph is written in the
fx-stage form (lowering/front/fx_graph.py) and handed to the same executor as the
lazy device: graph cache (memory and the persistent disk cache), compile worker, dumps
(LAZYMLIR_DUMP_DIR), metrics, and split-around-unsupported-ops fallback
(counted; an error with LAZYMLIR_FALLBACK=error).

Inputs and outputs are ordinary CPU tensors, or torch.cuda tensors on the cuda target:
those go in and come out through DLPack (the graph reads the caller's device memory
in place and its outputs become torch.cuda tensors over the runtime's buffers), with
no host round trip. Each output goes where AOTAutograd's fake tensors put it
(`_output_devices`): a graph captured with CPU inputs keeps the CPU path, and Dynamo's
device guards recompile when torch.cuda tensors arrive instead. Graphs with symbolic
sizes are compiled once for every size (dynamo_dynamic.py), or where that cannot be
done once per concrete shape (`_specialize_per_shape`). Each graph
starts compiling in a worker when AOTAutograd hands it over; with the
`eager_while_compiling` option its first run uses PyTorch's kernels
(`_run_eagerly`) instead of waiting, and the compile runs at low CPU priority
(executor.BACKGROUND_NICENESS) until the second run waits for it. The backend is
registered with Dynamo through the `torch_dynamo_backends` entry point, so
`backend="lazymlir"` works after `pip install` without importing lazymlir.
"""

from __future__ import annotations

import copy
import functools
import operator
import warnings

import torch
import torch.fx
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import dynamo_dynamic, dynamo_random, session, targets
from .distributed import compiled as compiled_collectives
from .execution import executor
from .lowering.front import as_strided, decompositions, fx_graph, symbolic


class UnsupportedGraphError(NotImplementedError):
    """A captured graph uses something the fx-stage form cannot express (e.g. SymInts)."""


def _desc(value, what: str, symbols=None) -> dict:
    if not isinstance(value, torch.Tensor):
        raise UnsupportedGraphError(
            f"{what} is a {type(value).__name__}, not a tensor; lazymlir compiles static "
            f"shapes only: use torch.compile(..., dynamic=False)")
    shape = symbols.shape(value) if symbols is not None else list(value.shape)
    return {"shape": shape, "dtype": fx_graph.dtype_name(value.dtype)}


def to_fx_stage(gm: torch.fx.GraphModule, symbols=None) -> tuple[dict, list, list]:
    """(graph document, constant tensors appended to the inputs, output layout).

    The layout maps each output of `gm` to a graph output index, to `Passed(i)`
    where `gm` returns its input i itself, or to None where `gm` returns None
    (AOTAutograd does for gradients nobody asked for).

    `symbols` (a dynamo_dynamic.Symbols): sizes are SymInts, written as expressions;
    size inputs are no graph inputs (the caller drops them), and size arguments are
    `{"sym": expression}`.
    """
    # The fx-stage form keeps no storage: as_strided must address its root first.
    as_strided.address_storage_roots(gm)
    inputs: list[dict] = []
    constants: list[torch.Tensor] = []
    nodes: list[dict] = []
    refs: dict[torch.fx.Node, object] = {}

    def encode(value):
        if isinstance(value, torch.fx.Node) and value in sizes:
            return _size_arg(sizes[value])
        if isinstance(value, torch.SymInt):
            return _size_arg(symbols.size(value))
        if isinstance(value, torch.fx.Node):
            if value in updates_of:
                raise UnsupportedGraphError(f"input '{value.name}' is read after the copy_ "
                                            f"that updates it")
            return {"ref": refs[value]}
        if isinstance(value, (list, tuple)):
            return [encode(v) for v in value]
        return fx_graph.encode_scalar(value)

    outputs: list = []
    layout: list[int | None] = []
    updates: dict[int, object] = {}  # input index -> its new value (a copy_ into it)
    updates_of: set[torch.fx.Node] = set()  # the placeholders updated so far
    checks: list = []  # (condition, message) of each runtime assertion
    sizes: dict[torch.fx.Node, int | str] = {}  # symbolic: size-valued nodes
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if symbols is not None:  # name the symbols the tensor inputs carry, in their order
        symbols.bind([n.meta.get("val") for n in placeholders
                      if not dynamo_dynamic.is_size(n.meta.get("val"))])
    for node in placeholders:
        if symbols is not None and dynamo_dynamic.is_size(node.meta.get("val")):
            continue  # bound below, once every tensor input has named its symbols
        refs[node] = ["input", len(inputs), 0]
        inputs.append(_desc(node.meta.get("val"), f"input '{node.name}'", symbols))
    if symbols is not None:
        for node in placeholders:
            if node not in refs:
                sizes[node] = symbols.size(node.meta["val"])
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            refs[node] = ["input", len(inputs), 0]  # after the tensor inputs
            constants.append(value.detach())
            inputs.append(_desc(value, f"constant '{node.target}'", symbols))
        elif node.op == "call_function" and node.target is torch.ops.aten.copy_.default:
            # An input mutation AOTAutograd kept in the graph (an inference graph: an
            # optimizer step, BatchNorm statistics under no_grad): the input's new value
            # is an output the graph updates in place (fx_graph "in_place").
            target, value = node.args[:2]
            if not isinstance(target, torch.fx.Node) or target.op != "placeholder":
                raise UnsupportedGraphError(f"node '{node.name}' copies into {target}, "
                                            f"not into a graph input")
            updates[placeholders.index(target)] = encode(value)
            updates_of.add(target)
            if node.users:  # copy_'s result: the updated input, i.e. the value copied
                if not isinstance(value, torch.fx.Node) or \
                        value.meta["val"].dtype != target.meta["val"].dtype:
                    raise UnsupportedGraphError(f"the result of '{node.name}' is used")
                refs[node] = refs[value]
        elif node.op == "call_function" and node.target in _ASSERTS:
            # A runtime check (one_hot's index range): its condition becomes an output
            # that run() reads, raising the message as eager would.
            checks.append((encode(node.args[0]), node.args[1] if len(node.args) > 1
                           else "assertion failed"))
        elif node.op == "call_function" and symbols is not None \
                and dynamo_dynamic.is_size(node.meta.get("val")):
            sizes[node] = symbols.size(node.meta["val"])  # sym_size, size arithmetic
        elif node.op == "call_function" and node.target is operator.getitem:
            source = refs[node.args[0]]
            refs[node] = ["node", source[1], node.args[1]]
        elif node.op == "call_function":
            if not isinstance(node.target, torch._ops.OpOverload):
                raise UnsupportedGraphError(f"node '{node.name}' calls {node.target}, not an "
                                            f"ATen op")
            val = node.meta.get("val")
            results = list(val) if isinstance(val, (list, tuple)) else [val]
            refs[node] = ["node", len(nodes), 0]
            nodes.append({
                "op": str(node.target),
                "args": [encode(a) for a in node.args],
                "kwargs": {k: encode(v) for k, v in node.kwargs.items()},
                # None: a result nobody asked for (an output_mask entry is false).
                "outputs": [None if r is None else _desc(r, f"output of '{node.name}'", symbols)
                            for r in results],
            })
        elif node.op == "output":
            for value in node.args[0]:
                if value is None:
                    layout.append(None)
                elif value in sizes and value.op != "placeholder":
                    # a size the backward needs (a forward's saved s0*s1): run() computes it
                    layout.append(SizeOut(sizes[value]))
                elif _passed_through(value, updates_of):
                    layout.append(Passed(placeholders.index(value)))
                else:
                    layout.append(len(outputs))
                    outputs.append(encode(value))
    graph = {"format": fx_graph.FORMAT, "version": fx_graph.VERSION, "inputs": inputs,
             "scalars": [], "nodes": nodes, "outputs": outputs}
    if checks:  # after the outputs `layout` maps: [output index, message]
        graph["checks"] = []
        for condition, message in checks:
            graph["checks"].append([len(outputs), message])
            outputs.append(condition)
    if updates:  # after the outputs `layout` maps
        graph["in_place"] = []
        for input_index, value in updates.items():
            # (the graph's input index: size inputs are not graph inputs)
            graph["in_place"].append([refs[placeholders[input_index]][1], len(outputs)])
            outputs.append(value)
    if symbols is not None:
        graph = symbols.document(graph)
    return graph, constants, layout


def _size_arg(size: int | str):
    """A size argument: an int, or an expression (lowering/front/symbolic.py)."""
    return size if isinstance(size, int) else {"sym": size}


_ASSERTS = (torch.ops.aten._assert_async.msg, torch.ops.aten._assert_async.default)


def _check_assertions(checks, outs, target, metas) -> None:
    for index, message in checks:
        value = outs[index]
        if not isinstance(value, torch.Tensor):  # target data (device memory)
            value = target.give_back(value, metas[index], None)
        if not bool(value.cpu()):
            raise RuntimeError(message)


class Passed(int):
    """A layout entry: `gm` returns its input of this index itself."""


class SizeOut(str):
    """A layout entry: `gm` returns a size, this expression over the graph's symbols
    (lowering/front/symbolic.py), computed from the inputs' sizes at run time."""


def _passed_through(value, updates_of) -> bool:
    """`value`, an output of the graph, is one of its inputs, unchanged: the caller's
    tensor is the output (as inductor's code returns it). A forward graph returns
    inputs the backward needs (the weights, the batch): as graph outputs, the compiled
    code copied them (an MLP's forward copied 576 KB per step)."""
    return isinstance(value, torch.fx.Node) and value.op == "placeholder" \
        and value not in updates_of


def _compile(gm: torch.fx.GraphModule, example_inputs, eager_while_compiling=None,
             prepared=None):
    # AOTAutograd hands graphs over inside its FakeTensorMode: the graph's constants
    # (a `torch.tensor(...)` made in forward, e.g. an attention mask's fill value) are
    # real tensors, which an op dispatched under that mode rejects.
    with unset_fake_temporarily():
        if compiled_collectives.has_collectives(gm):
            # Collectives are runtime calls: the pieces between them compile.
            if prepared is not None:
                raise dynamo_dynamic.NotSymbolic("it has collectives")
            return compiled_collectives.split(
                gm, example_inputs,
                lambda piece, inputs: _compile_real(piece, inputs, eager_while_compiling))
        return _compile_real(gm, example_inputs, eager_while_compiling, prepared)


def _compile_real(gm: torch.fx.GraphModule, example_inputs, eager_while_compiling,
                  prepared=None):
    """`prepared`: a list for a graph with symbolic sizes (dynamo_dynamic.py), which
    gets its (document, key); its first run does not go eagerly."""
    # Random ops become Philox arithmetic reading one more input: the generator's
    # seed and offsets, drawn at each call (dynamo_random.py).
    random_inputs = dynamo_random.rewrite(gm)
    if random_inputs is not None and prepared is not None:
        raise dynamo_dynamic.NotSymbolic("it draws random numbers")
    symbols = dynamo_dynamic.Symbols() if prepared is not None else None
    graph, constants, layout = to_fx_stage(gm, symbols)
    target = targets.active()
    key = fx_graph.structural_hash(graph, target.name)
    metas = fx_graph.output_metas(graph)  # once: run() is on every step's path
    # Compile now, in the background: AOTAutograd hands over the backward graph right
    # after the forward (_static_backend), so the two compile at once while Dynamo
    # finishes; the first run() waits for its graph (with eager_while_compiling it
    # does not, and the compile takes the low-priority background workers).
    computes = bool(graph["outputs"])
    # Decided once, here: the compile's pool (its priority) and whether the first run
    # goes without it must agree.
    eager_first_run = _eager_tier(eager_while_compiling) and prepared is None
    if computes:
        executor.compile_ahead(graph, key, background=eager_first_run)
        if prepared is not None:
            prepared.append((graph, key))
    # The positions of the tensor inputs (a graph with symbolic sizes also takes them)
    sized = None if symbols is None else \
        [i for i, n in enumerate(gm.graph.find_nodes(op="placeholder"))
         if not dynamo_dynamic.is_size(n.meta.get("val"))]

    devices = _output_devices(gm, layout)
    # Dynamo guards on every input's device: the devices seen now are the devices of
    # every call, so they are checked once, here.
    _check_devices(example_inputs, target)
    borrowed_constants = [target.borrow(c) for c in constants]
    borrow = target.borrow
    as_is = target.plain_cpu_tensors

    in_place = graph.get("in_place", ())
    checks = graph.get("checks", ())
    passed_inputs = sorted({i for i in layout if type(i) is Passed})
    size_outputs = any(type(i) is SizeOut for i in layout)
    first_run = True

    def run(args):
        nonlocal first_run
        if random_inputs is not None:
            args.append(random_inputs.seed_offsets())
        if first_run:
            # Only the first run may go without its compile: the compile is niced
            # (executor.BACKGROUND_NICENESS), and a program that kept running eagerly
            # would keep it from the cores for good (PyTorch's idle OpenMP threads spin:
            # on 2 cores a GPT training loop runs 1815 eager steps in 2 minutes with its
            # compiles still unfinished; at normal priority they end by step 19). Waiting
            # at the second run gives the compile every core for what is left of it.
            first_run = False
            if eager_first_run and executor.compile_pending(key):
                return _run_eagerly(gm, args)
        tensors = args if sized is None else [args[i] for i in sized]
        inputs = list(tensors) if as_is else [borrow(a) for a in tensors]
        inputs += borrowed_constants
        updated = [tensors[i] for i, _ in in_place]
        passed = {i: args[i] for i in passed_inputs}
        if size_outputs:
            passed.update(_sizes_out(layout, graph["symbols"], inputs))
        args.clear()  # boxed calling convention: let AOTAutograd free what it can
        # (a graph whose outputs are all its inputs computes nothing: AOTAutograd
        # drops nodes nobody reads)
        outs = executor.execute(graph, inputs, [], key=key) if computes else []
        if checks:
            _check_assertions(checks, outs, target, metas)
        if in_place:
            _update_inputs(target, in_place, updated, outs, metas)
        # (the in-place updates, after the outputs AOTAutograd takes, are not given back)
        if not as_is:
            outs = [target.give_back(o, metas[i], devices[i])
                    for i, o in enumerate(outs[:len(devices)])]
        if passed:
            return [None if i is None else passed[i] if type(i) in (Passed, SizeOut)
                    else outs[i] for i in layout]
        return [None if i is None else outs[i] for i in layout]

    run._boxed_call = True  # AOTAutograd's boxed convention (functorch.compile.make_boxed_func)
    return run


def _sizes_out(layout: list, symbols: dict, inputs: list) -> dict:
    values = {name: symbolic.size_of(inputs, source) for name, source in symbols.items()}
    return {i: symbolic.evaluate(i, values) for i in layout if type(i) is SizeOut}


def _update_inputs(target, in_place, originals: list, outs: list, metas) -> None:
    """The copy_ of each in-place update the run did not write into the caller's tensor:
    the cpu target's compiled code writes its input buffer and returns it, which is the
    caller's tensor unless that was strided (a dense copy); other plans return a new
    buffer."""
    for (_, output), original in zip(in_place, originals):
        value = outs[output]
        if value is not original:
            device = original.device if original.device.type == "cuda" else None
            original.copy_(target.give_back(value, metas[output], device))


def _eager_tier(option: bool | None) -> bool:
    """torch.compile's `options={"eager_while_compiling": ...}`, else the setting."""
    return session.current().settings.eager_while_compiling if option is None else option


def _run_eagerly(gm: torch.fx.GraphModule, args: list) -> list:
    """Run AOTAutograd's graph with PyTorch's own kernels, while lazymlir compiles it.

    The graph is the functional, decomposed one the compile worker is lowering, so
    this is what AOTAutograd's `aot_eager` backend runs: eager numbers, and the step
    does not wait for the compile (Dynamo traces the rest of the program meanwhile,
    e.g. the optimizer step). Counted, and not an op fallback: nothing failed to lower.
    """
    session.current().metrics.inc("EagerWhileCompiling")
    outs = gm(*args)
    args.clear()  # boxed calling convention, as in run()
    return list(outs)


def _output_devices(gm: torch.fx.GraphModule, layout: list) -> list[torch.device | None]:
    """Per graph output (to_fx_stage's outputs: `layout`'s int entries), the CUDA
    device AOTAutograd's fake tensors put it on, or None for a CPU output."""
    devices = []
    for node in gm.graph.find_nodes(op="output"):
        for value, index in zip(node.args[0], layout):
            if index is None or type(index) is Passed:
                continue
            val = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
            if val is None and value.op == "get_attr":
                val = getattr(gm, value.target)
            device = getattr(val, "device", None)
            devices.append(device if device is not None and device.type == "cuda" else None)
    return devices


def _check_devices(args, target) -> None:
    """torch.cuda inputs need the cuda target: the cpu target's compiled code would read
    device pointers as host memory."""
    if target.name != "cuda" and any(isinstance(a, torch.Tensor) and a.device.type == "cuda"
                                     for a in args):
        raise RuntimeError(
            f"torch.compile(backend='lazymlir') got torch.cuda inputs, but the lazymlir "
            f"target is {target.name}: use LAZYMLIR_TARGET=cuda (or auto on a machine "
            f"with a GPU), or pass CPU tensors")


def _fma(a, b, c):
    return a * b + c


def _decompositions():
    from torch._inductor import inductor_prims
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    # torch-mlir's whole table. Not the lazy device's (which keeps native_layer_norm,
    # addmm, softmax... whole): with it a 4096x1024 layer_norm through torch.compile
    # takes 1.6 ms instead of 6.1 (one thread: var_mean is computed in float64, as
    # eager's var), but the GPT training step goes from 0.92x to 1.06x eager
    # (docs/cpu-performance.md).
    table = dict(get_decomposition_table())
    table.update(decompositions.TABLE)
    # Dynamo itself rewrites `addcmul_(..., value=)` (every Adam/AdamW/RMSprop step) into
    # inductor's `prims.fma` (torch._dynamo.config.enable_dynamo_decompositions), an op
    # only inductor lowers and only `torch._inductor` registers. Eager's addcmul rounds
    # the product, so a*b+c is what eager computes.
    table[inductor_prims.fma] = _fma   # make_prim returns the OpOverload itself
    return table


def _static_backend(gm: torch.fx.GraphModule, example_inputs, eager_while_compiling=None,
                    prepared=None):
    # Attention is traced as its math form: the fused CPU kernels' forward
    # decomposes, but their backward has no decomposition and would run
    # eagerly against a decomposed forward's saved logsumexp (wrong gradients
    # from the second step on, measured).
    # force_non_lazy_backward_lowering: the backward graph is handed to _compile now,
    # not at the first backward, so it compiles while the forward does (a graph that
    # never runs backward still compiles it, in the background).
    with sdpa_kernel([SDPBackend.MATH]), \
            torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        compile_graph = functools.partial(_compile, eager_while_compiling=eager_while_compiling,
                                          prepared=prepared)
        # The min-cut partitioner (inductor's) recomputes cheap ops in the backward
        # instead of saving them: the forward does not write out each Linear's W.t()
        # for the backward to transpose back. Measured A/B in one process against the
        # default partitioner, the three graphs of an MLP step run in 0.92-0.96 of the
        # time, a GPT step's in 0.98.
        return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph,
                            partition_fn=min_cut_rematerialization_partition,
                            # An inference graph's input mutations (an optimizer step's
                            # parameter and state updates) stay in the graph as copy_
                            # into its inputs: the compiled code updates them in place
                            # (lowering/bufferize/graph_inputs.py) instead of returning new
                            # tensors that AOTAutograd copies back (GPT AdamW step:
                            # 112 copies and their output buffers per step).
                            keep_inference_input_mutations=True,
                            decompositions=_decompositions())(gm, example_inputs)


def _is_symbolic(value) -> bool:
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride()))


def _signature(value):
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), tuple(value.stride()), value.dtype, value.requires_grad)
    return value


def _bind_non_tensors(gm: torch.fx.GraphModule, args) -> tuple[torch.fx.GraphModule, list]:
    """A copy of `gm` with its non-tensor inputs (sizes Dynamo passes as SymInts)
    replaced by their values, and the positions of the tensor inputs it still takes."""
    graph = copy.deepcopy(gm.graph)
    kept = []
    for i, (node, value) in enumerate(zip(list(graph.find_nodes(op="placeholder")), args)):
        if isinstance(value, torch.Tensor):
            kept.append(i)
        else:
            node.replace_all_uses_with(value)
            graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph), kept


def _specialize_per_shape(gm: torch.fx.GraphModule, eager_while_compiling=None):
    """A callable that compiles `gm` once per concrete input signature.

    The pipeline compiles static shapes. Dynamo marks a dimension dynamic after it
    has seen it change (automatic dynamic shapes, the default of torch.compile) or
    when asked (dynamic=True), and then hands over a graph with SymInt sizes; it
    is traced again here with the concrete inputs of each new shape (sizes bound as
    constants), each specialization goes through the caches like any other graph,
    and Dynamo's guards stay valid for all of them. Costs one compile per distinct
    shape, as dynamic=False would, without Dynamo's recompile limit.
    """
    specializations: dict[tuple, tuple] = {}

    def run(*args):
        key = tuple(_signature(a) for a in args)
        entry = specializations.get(key)
        if entry is None:
            static_gm, kept = _bind_non_tensors(gm, args)
            compiled = _static_backend(static_gm, [args[i] for i in kept],
                                       eager_while_compiling)
            entry = specializations[key] = (compiled, kept)
        compiled, kept = entry
        return compiled(*[args[i] for i in kept])

    return run


# torch.compile(..., options={...}) for this backend: name -> type.
OPTIONS = {"eager_while_compiling": bool}


def _backend_options(options, mode) -> bool | None:
    """The eager_while_compiling option (None: the setting decides, when AOTAutograd
    hands a graph over)."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"torch.compile(backend='lazymlir'): unknown option(s) {unknown}; "
                         f"known: {', '.join(f'{k} ({t.__name__})' for k, t in OPTIONS.items())}")
    for name, kind in OPTIONS.items():
        if name in options and not isinstance(options[name], kind):
            raise TypeError(f"torch.compile(backend='lazymlir'): option {name} must be a "
                            f"{kind.__name__}, got {options[name]!r}")
    if mode not in (None, "default"):
        warnings.warn(f"lazymlir: torch.compile(mode={mode!r}) is ignored: the lazymlir "
                      f"backend has one mode", stacklevel=3)
    return options.get("eager_while_compiling")


def lazymlir_backend(gm: torch.fx.GraphModule, example_inputs, options=None, mode=None):
    """The Dynamo backend: AOTAutograd with lazymlir compiling forward and backward.

    `options` (torch.compile's): {"eager_while_compiling": True} runs a graph's first
    run with PyTorch's kernels if its compile, started in the background at low CPU
    priority, has not finished; later runs wait for it (default: the
    LAZYMLIR_EAGER_WHILE_COMPILING setting, off: the first run waits).
    """
    if example_inputs and isinstance(example_inputs[0], list):
        # Compiled autograd (DDP's python_reducer mode) hands its tensors over as one
        # list: one input each, as inductor's flatten_graph_inputs does.
        return compiled_collectives.unbox_list_input(gm, example_inputs, functools.partial(
            lazymlir_backend, options=options, mode=mode))
    eager_while_compiling = _backend_options(options, mode)
    # A graph to compile is coming: the compile workers import the compiler while
    # AOTAutograd traces (not when the disk cache is warm: executor.prestart_worker);
    # two for a graph that will have a backward, compiled alongside its forward.
    training = torch.is_grad_enabled() and any(
        getattr(x, "requires_grad", False) for x in example_inputs)
    executor.prestart_worker(workers=2 if training else 1,
                             background=_eager_tier(eager_while_compiling))
    if any(_is_symbolic(x) for x in example_inputs):
        if not dynamo_dynamic.asked_for(gm):
            return _specialize_per_shape(gm, eager_while_compiling)
        # One graph for every size (dynamo_dynamic.py), else one per shape.
        return dynamo_dynamic.compile_symbolic(
            lambda g, inputs, prepared: _static_backend(g, inputs, eager_while_compiling,
                                                        prepared),
            lambda: _specialize_per_shape(gm, eager_while_compiling), gm, example_inputs)
    return _static_backend(gm, example_inputs, eager_while_compiling)


# Installed packages register the backend through the entry point; a source
# checkout (or an environment without the entry point) registers it on import.
if "lazymlir" not in torch._dynamo.list_backends(exclude_tags=()):
    torch._dynamo.register_backend(lazymlir_backend, name="lazymlir")

"""A large CPU module's LLVM IR cut into compile units, each named by a hash of its code.

lowering/cpu/outline.py makes each loop nest of a graph a function of its own, which
only the graph entry (`_mlir_ciface_main`, lowering/cpu/c_interface.py) calls. A
*unit* is such a function (a *root*: one the entries call) with the local functions it
calls (OpenMP regions, math helpers); its *key* hashes its code with every name that
is the module's choice made canonical: its own name (`main$nest17` here is
`main$nest9` in the next graph), the private globals it reads (`@assert_msg_0` /
`@assert_msg_1`), attribute group and metadata numbers. Two graphs that share a nest
share its key, which is what lowering/cpu/object_cache.py stores object code under.

The cut is done on the IR text, in one pass over it (0.2 s for the 3599 nests of a
DenseNet-121 training step, 15 MB), where `llvm-extract` (entry apart) and
`llvm-split` (parts) each parsed the whole module again (3.7 s and 1.0 s of CPU).
A module of another shape (a public function other than an entry, a global that
points to a function) is not cut: `cut` returns None and codegen.py compiles it the
old way.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

_NAME = r'(?:"[^"]+"|[-\w$.]+)'
# A reference in a function's text: a global name, an attribute group, a metadata node.
_TOKEN = re.compile(rf'@({_NAME})|#(\d+)\b|!(\d+)\b')
_GLOBAL_REF = re.compile(rf'@({_NAME})')
_DEFINED_NAME = re.compile(rf'@({_NAME})\(')
_GLOBAL_LINE = re.compile(rf'^@({_NAME}) = ', re.MULTILINE)
_DECLARE_LINE = re.compile(rf'^declare [^@\n]*@({_NAME})\(', re.MULTILINE)
_ATTRIBUTE_LINE = re.compile(r'^attributes #(\d+) = ', re.MULTILINE)
_METADATA_LINE = re.compile(r'^!(\d+) = ', re.MULTILINE)
_NAMED_METADATA_LINE = re.compile(r'^![-\w$.]+ = .*$', re.MULTILINE)
_LOCAL = re.compile(r'^define (?:internal|private)\b')
# Where the new name of a root goes in its `define` line: after the linkage.
_LINKAGE = re.compile(r'^define (?:internal|private) ')

# A root's symbol in the object code: a function of its key only, so that the entry of
# any graph can call the copy another graph's compile left in the cache.
SYMBOL_PREFIX = "lazymlir.nest."


@dataclass
class Function:
    name: str        # as written after `@` (quoted if it must be)
    text: str        # from `define` to its closing `}` and newline
    calls: list[str] = field(default_factory=list)  # the defined functions it names


@dataclass
class Module:
    """A module cut at its functions: `header` is every line outside them (globals,
    declarations, attribute groups, metadata), in order."""

    header: str
    entries: list[Function]
    functions: dict[str, Function]   # every other defined function (all local)
    roots: list[str]                 # the functions the entries name, first use first
    _lines: dict[str, dict[str, str]] = field(default_factory=dict)

    def definitions(self, kind: str) -> dict[str, str]:
        """Name -> its line in the header, for `global`, `declare`, `attributes` and
        `metadata` (numbered nodes); found once, on first use."""
        if not self._lines:
            for name, pattern in (("global", _GLOBAL_LINE), ("declare", _DECLARE_LINE),
                                  ("attributes", _ATTRIBUTE_LINE),
                                  ("metadata", _METADATA_LINE)):
                self._lines[name] = {m.group(1): _line_at(self.header, m.start())
                                     for m in pattern.finditer(self.header)}
        return self._lines[kind]


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def cut(llvm_ir: str, entry_prefix: str, also: tuple[str, ...] = ()) -> Module | None:
    """The module's entries (public functions named `entry_prefix`..., or one of `also`)
    and other functions, or None if it has no entry or a shape the units do not cover."""
    pieces, entries, functions = [], [], {}
    position = 0
    while True:
        start = llvm_ir.find("\ndefine ", position)
        if start < 0:
            break
        end = llvm_ir.find("\n}\n", start)
        if end < 0:
            return None
        pieces.append(llvm_ir[position:start + 1])
        text = llvm_ir[start + 1:end + 3]
        head = text[:text.find("\n")]
        found = _DEFINED_NAME.search(head)
        if found is None:
            return None
        function = Function(found.group(1), text)
        name = found.group(1).strip('"')
        if (name.startswith(entry_prefix) or name in also) and not _LOCAL.match(head):
            entries.append(function)
        elif _LOCAL.match(head):
            functions[function.name] = function
        else:
            return None  # a public function (a cuda emulator kernel): not a nest
        position = end + 2
    pieces.append(llvm_ir[position:])
    # (without the `; Function Attrs` comment and blank line around each function)
    header = "".join(line for line in "".join(pieces).splitlines(keepends=True)
                     if not line.startswith(";") and not line.isspace())
    if not entries or not functions.keys().isdisjoint(_GLOBAL_REF.findall(header)):
        return None  # (a global that points to a function: kept out of units)
    roots: dict[str, None] = {}
    for function in [*entries, *functions.values()]:
        named = dict.fromkeys(_GLOBAL_REF.findall(function.text))
        named.pop(function.name, None)
        function.calls = [name for name in named if name in functions]
        if function in entries:
            roots.update(dict.fromkeys(function.calls))
    return Module(header, entries, functions, list(roots))


def closure(module: Module, root: str) -> list[str]:
    """`root` and the local functions it calls, directly or not (root first)."""
    order, stack = [root], [root]
    seen = {root}
    while stack:
        for callee in module.functions[stack.pop()].calls:
            if callee not in seen:
                seen.add(callee)
                order.append(callee)
                stack.append(callee)
    return order


def unit_key(module: Module, root: str, salt: str) -> str:
    """A hash of the code of `root`'s unit and of everything it refers to (declarations,
    private globals, attributes, metadata), with the module's own names and numbers
    replaced by their order of first use; `salt` names how it is compiled."""
    functions = closure(module, root)
    renamed = {name: f"@__f{i}" for i, name in enumerate(functions)}
    globals_, declarations = module.definitions("global"), module.definitions("declare")
    attributes, metadata = module.definitions("attributes"), module.definitions("metadata")
    pending: list[str] = []  # definitions to hash, in the order they were first named

    def canonical(match: re.Match) -> str:
        name, group, node = match.groups()
        if name is not None:
            if name in renamed:
                return renamed[name]
            if name in globals_:
                renamed[name] = f"@__g{len(renamed)}"
                pending.append(globals_[name])
                return renamed[name]
            if name in declarations:  # a library function: its name is what it is
                renamed[name] = f"@{name}"
                pending.append(declarations[name])
            return match[0]
        kind, number, table = ("#", group, attributes) if group is not None \
            else ("!", node, metadata)
        token = f"{kind}{number}"
        if token not in renamed:
            renamed[token] = f"{kind}__{len(renamed)}"
            if number in table:
                pending.append(table[number])
        return renamed[token]

    digest = hashlib.sha256(salt.encode())
    for name in functions:
        text = module.functions[name].text
        head = text.find("\n")
        body = text[head:]
        # Most bodies name nothing of the module's (a nest: loads, stores, arithmetic):
        # their text is hashed as it is (a check at memchr speed, then no regex).
        if "@" in body or "#" in body or "!" in body:
            digest.update(_TOKEN.sub(canonical, text).encode())
        else:
            digest.update(_TOKEN.sub(canonical, text[:head]).encode())
            digest.update(body.encode())
    # Module flags (`!llvm.module.flags`) reach every function's code generation.
    pending.extend(_NAMED_METADATA_LINE.findall(module.header))
    done = 0
    while done < len(pending):  # definitions name others (metadata nodes, attributes)
        digest.update(_TOKEN.sub(canonical, pending[done]).encode() + b"\n")
        done += 1
    return digest.hexdigest()[:32]


def symbol(key: str) -> str:
    return f"{SYMBOL_PREFIX}{key}"


def root_definition(module: Module, root: str, key: str) -> str:
    """`root`'s text, named for its key and defined `weak_odr hidden`: several objects
    that define it (two parts of the cache compiled from different graphs) link as
    one, and the linker drops the copies nothing calls (`--gc-sections`)."""
    text = module.functions[root].text
    head_end = text.find("\n")
    head = _LINKAGE.sub("define weak_odr hidden ", text[:head_end], count=1)
    head = head.replace(f"@{root}(", f"@{symbol(key)}(", 1)
    return head + text[head_end:]


def part_text(module: Module, units: list[tuple[str, str]]) -> str:
    """A module of the (root, key) units: the header, each root under its key's name,
    and the local functions they call, once each."""
    texts, helpers = [module.header], {}
    for root, key in units:
        texts.append(root_definition(module, root, key))
        for name in closure(module, root)[1:]:
            helpers[name] = module.functions[name].text
    texts.extend(helpers.values())
    return "\n".join(texts)


def entries_text(module: Module, keys: dict[str, str]) -> str:
    """A module of the entries, calling each root by its key's name (declared hidden:
    defined in another object of the same shared library)."""
    declarations = {}  # (two roots of one key: one function, declared once)
    for root in module.roots:
        if keys[root] in declarations:
            continue
        head = module.functions[root].text.split("\n", 1)[0]
        head = _LINKAGE.sub("declare hidden ", head, count=1).rstrip(" {")
        declarations[keys[root]] = head.replace(f"@{root}(", f"@{symbol(keys[root])}(", 1)
    names = {f"@{root}": f"@{symbol(keys[root])}" for root in module.roots}

    def rename(match: re.Match) -> str:
        return names.get(match[0], match[0])

    bodies = [_GLOBAL_REF.sub(rename, entry.text) for entry in module.entries]
    return "\n".join([module.header, *declarations.values(), *bodies])

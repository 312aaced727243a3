// The lazy_mlir device's dispatch entry, in C++ (built and loaded by tracing/native.py).
//
// Inner lazy tensors (what functionalization wraps) are `LazyImpl`s: storage-less
// TensorImpls of the PrivateUse1 key holding their LazyValue (a Python object). Every
// op the dispatcher sends to PrivateUse1 comes to `entry`, registered for each op in
// the process (a kernel, not only a backend fallback: CompositeExplicitAutograd
// kernels would otherwise be chosen before a fallback) and as the backend fallback for
// ops registered later. `entry` records the common case itself, with no Python frame:
// an op whose route is its recorder (tracer.py), every argument a lazy tensor, None, a
// number, a list of ints, of bools or of lazy tensors, a string, a dtype, a layout or a
// memory format, and its output shapes in this op's shape cache; its outputs tensors or
// one list of tensors (split_copy's).
// It then makes the Node and LazyValue objects the Python tracer would have made
// (their __slots__ written directly) and outputs whose Python objects are made only
// if Python ever asks for them. Everything else (special ops, decompositions, random
// ops, in-place and foreach ops, host tensors, a cache miss that cannot be inferred)
// goes to the Python tracer, `tracer.native_entry(func, args, kwargs)`, with the
// arguments boxed as PyTorch's Python dispatch would box them.
//
// Why not __torch_dispatch__ (the design before): PyTorch's C++ -> Python entry
// (boxing every argument, finding the dispatch rule, the Python call) and the output
// wrapper's Python object cost ~4 of the ~6 us a small op took to record; this entry
// records one in about eager's dispatch time (docs/tracing-performance.md).

#include <Python.h>
#include <structmember.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/irange.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

constexpr c10::DeviceType kLazy = c10::DeviceType::PrivateUse1;

// ------------------------------------------------------------ the Python side's objects

struct Refs {
  PyTypeObject* lazy_tensor = nullptr;  // values.LazyTensor (the inner tensors' class)
  PyTypeObject* lazy_value = nullptr;   // values.LazyValue
  PyTypeObject* node = nullptr;         // values.Node
  PyObject* node_ids = nullptr;         // values._node_ids: Node.seq
  PyObject* entry = nullptr;            // tracer.native_entry(func, args, kwargs)
  PyObject* describe = nullptr;         // tracer.native_op(func) -> (leaf, lift, node op)
  PyObject* infer = nullptr;            // recording.native_shape_entry(func, args, kwargs)
  PyObject* session_globals = nullptr;  // lazymlir.session's module dict
  PyObject* current_name = nullptr;     // "_current": the live session
  PyObject* no_kwargs = nullptr;        // recording._NO_KWARGS
  PyObject* element_op = nullptr;       // tracer.native_foreach(func, args, kwargs)
  // __slots__ offsets
  Py_ssize_t v_meta, v_node, v_index, v_data, v_error, v_sig, v_run;
  Py_ssize_t n_op, n_args, n_kwargs, n_out_metas, n_seq, n_static;
};
Refs R;
bool configured = false;

Py_ssize_t slot_offset(PyTypeObject* type, const char* name) {
  PyObject* descr = PyDict_GetItemString(type->tp_dict, name);  // borrowed
  if (descr == nullptr || Py_TYPE(descr) != &PyMemberDescr_Type) {
    throw std::runtime_error(std::string("lazymlir native entry: ") + type->tp_name + "." +
                             name + " is not a __slots__ member");
  }
  return reinterpret_cast<PyMemberDescrObject*>(descr)->d_member->offset;
}

inline PyObject*& slot(PyObject* object, Py_ssize_t offset) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(object) + offset);
}

inline PyObject* get_slot(PyObject* object, Py_ssize_t offset) {
  PyObject* v = slot(object, offset);
  return v == nullptr ? Py_None : v;
}

// Takes a new reference to `v`.
inline void set_slot(PyObject* object, Py_ssize_t offset, PyObject* v) {
  PyObject* old = slot(object, offset);
  slot(object, offset) = v;
  Py_XDECREF(old);
}

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

struct Gil {  // the GIL, held for a scope (re-entrant: the caller may hold it already)
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};

// ------------------------------------------------------------ the inner tensor

struct LazyImpl;
void unlink_live(LazyImpl* impl);

struct LazyImpl final : public c10::TensorImpl {
  PyObject* value;  // strong reference to the LazyValue
  // Its place in the list of live tensors (below; GIL held to read or change them).
  LazyImpl* live_prev = nullptr;
  LazyImpl* live_next = nullptr;
  bool listed = false;

  LazyImpl(c10::Storage&& storage, caffe2::TypeMeta dtype, PyObject* v)
      : c10::TensorImpl(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                        dtype),
        value(v) {}

  ~LazyImpl() override { drop(); }

  // When the last strong reference goes: the live list's weak reference keeps the
  // object's memory until drop() unlinks it, and must not keep the value alive.
  void release_resources() override {
    drop();
    c10::TensorImpl::release_resources();
  }

  void drop() {
    PyObject* v = value;
    value = nullptr;
    if ((v != nullptr || listed) && python_alive()) {
      PyGILState_STATE gil = PyGILState_Ensure();
      unlink_live(this);
      Py_XDECREF(v);
      PyGILState_Release(gil);
    }
  }

  template <typename Version>
  c10::intrusive_ptr<c10::TensorImpl> copy(Version&& version, bool allow_change) const;

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version, bool allow_change) const override {
    return copy(version, allow_change);
  }
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version, bool allow_change) const override {
    return copy(std::move(version), allow_change);
  }
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override {
    auto* other = dynamic_cast<LazyImpl*>(impl.get());
    TORCH_CHECK(other != nullptr, "lazy_mlir: cannot take the metadata of a non-lazy tensor");
    copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XINCREF(other->value);
    Py_XDECREF(value);
    value = other->value;
    PyGILState_Release(gil);
  }
  const char* tensorimpl_type_name() const override { return "LazyMlirTensorImpl"; }
};

inline LazyImpl* lazy_impl(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  return dynamic_cast<LazyImpl*>(t.unsafeGetTensorImpl());
}

// ------------------------------------------------------------ live tensors
// Every inner tensor, weakly: mark_step materializes the pending ones. Per session,
// as tracing/values.py kept them: a new session (lazymlir.session.reset) starts a new
// list. Only touched with the GIL held.
//
// An intrusive doubly linked list in creation order, each member holding a weak
// reference, unlinked by its release_resources (drop): a tensor's memory goes back as
// soon as it dies. (A vector of weak references swept when it had doubled kept ~4096
// dead TensorImpls' memory at a time: their frees and the mallocs after them missed
// malloc's per-thread cache, ~0.2 us per view, docs/tracing-performance.md.)

LazyImpl* live_head = nullptr;
LazyImpl* live_tail = nullptr;
PyObject* live_owner = nullptr;

void link_live(LazyImpl* impl) {
  c10::raw::weak_intrusive_ptr::incref(impl);
  impl->listed = true;
  impl->live_prev = live_tail;
  impl->live_next = nullptr;
  if (live_tail != nullptr) {
    live_tail->live_next = impl;
  } else {
    live_head = impl;
  }
  live_tail = impl;
}

// (from release_resources: the list's weak reference is not the last one, the dying
// strong reference's own weak count still is)
void unlink_live(LazyImpl* impl) {
  if (!impl->listed) return;
  impl->listed = false;
  if (impl->live_prev != nullptr) {
    impl->live_prev->live_next = impl->live_next;
  } else {
    live_head = impl->live_next;
  }
  if (impl->live_next != nullptr) {
    impl->live_next->live_prev = impl->live_prev;
  } else {
    live_tail = impl->live_prev;
  }
  impl->live_prev = impl->live_next = nullptr;
  c10::raw::weak_intrusive_ptr::decref(impl);
}

void clear_live() {
  while (live_head != nullptr) unlink_live(live_head);
}

// Strong references to the live members, in creation order. Collected before any of
// them is used: using one may run Python code, which may unlink others.
std::vector<c10::intrusive_ptr<c10::TensorImpl>> live_members() {
  std::vector<c10::intrusive_ptr<c10::TensorImpl>> out;
  for (LazyImpl* impl = live_head; impl != nullptr; impl = impl->live_next) {
    c10::TensorImpl* strong = c10::raw::weak_intrusive_ptr::lock(static_cast<c10::TensorImpl*>(impl));
    if (strong != nullptr) out.push_back(c10::intrusive_ptr<c10::TensorImpl>::reclaim(strong));
  }
  return out;
}

void track(const at::Tensor& t) {
  PyObject* current = PyDict_GetItem(R.session_globals, R.current_name);  // borrowed
  if (current != live_owner) {
    clear_live();
    Py_XINCREF(current);
    Py_XDECREF(live_owner);
    live_owner = current;
  }
  link_live(static_cast<LazyImpl*>(t.unsafeGetTensorImpl()));
}

// A new inner tensor holding `value` (a new reference, taken), contiguous, tracked.
at::Tensor make_tensor(c10::IntArrayRef sizes, caffe2::TypeMeta dtype, PyObject* value) {
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  // A storage without memory, as a wrapper subclass has: code that asks a tensor for
  // its storage (nbytes, an identity) gets one; the device's allocator refuses data.
  c10::Storage storage(c10::Storage::use_byte_size_t(),
                       static_cast<size_t>(numel) * dtype.itemsize(),
                       c10::DataPtr(nullptr, c10::Device(kLazy, 0)), nullptr, false);
  auto tensor = at::detail::make_tensor<LazyImpl>(std::move(storage), dtype, value);
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  track(tensor);
  return tensor;
}

template <typename Version>
c10::intrusive_ptr<c10::TensorImpl> LazyImpl::copy(Version&& version, bool allow_change) const {
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_XINCREF(value);
  c10::Storage storage = storage_;
  auto impl = c10::make_intrusive<LazyImpl>(std::move(storage), data_type_, value);
  copy_tensor_metadata(this, impl.get(), std::forward<Version>(version), allow_change);
  impl->refresh_numel();
  at::Tensor tensor(impl);
  if (configured) track(tensor);
  PyGILState_Release(gil);
  return impl;
}

// The inner tensor's Python object, of class LazyTensor (new reference). PyTorch's own
// boxing (a Python kernel, torch._from_functional_tensor) may have made it a plain
// torch.Tensor first: its class is then set.
PyObject* wrap(const at::Tensor& t) {
  PyObject* object = nullptr;
  try {
    object = THPVariable_Wrap(t, R.lazy_tensor);
  } catch (const std::exception&) {
    object = nullptr;  // it has a Python object of another class already
  }
  if (object == nullptr) {
    PyErr_Clear();
    object = THPVariable_Wrap(t);
  }
  if (object != nullptr && Py_TYPE(object) != R.lazy_tensor && lazy_impl(t) != nullptr) {
    if (PyObject_SetAttrString(object, "__class__", reinterpret_cast<PyObject*>(R.lazy_tensor))) {
      Py_DECREF(object);
      return nullptr;
    }
  }
  return object;
}

void entry(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ------------------------------------------------------------ per op

struct Output {
  PyObject* meta;  // meta tensor (LazyValue.meta)
  PyObject* sig;   // LazyValue.sig
  std::vector<int64_t> sizes;
  caffe2::TypeMeta dtype;
};

struct ShapeEntry {
  PyObject* metas;  // Node.out_metas
  PyObject* token;  // Node.static
  std::vector<Output> outputs;
};

enum class Arg : uint8_t {
  Tensor, Int, Float, Bool, Scalar, IntList, BoolList, TensorList, Dtype, Layout, MemoryFormat, Str, Other
};

struct OpInfo {
  std::optional<c10::OperatorName> name;  // (an op removed, another made at its address)
  bool leaf = false;     // its route is the recorder: recorded here when it can be
  bool lift = false;     // floats become scalar graph inputs (out of the cache key)
  bool list_out = false; // returns one `Tensor[]` (split_copy): as many outputs as its entry has
  PyObject* func = nullptr;     // the OpOverload
  PyObject* node_op = nullptr;  // the Node's op (view_copy -> view ...)
  size_t kwarg_only_start = 0;
  std::vector<Arg> kinds;
  std::vector<PyObject*> names;  // argument names (keyword arguments)
  std::unordered_map<std::string, ShapeEntry> shapes;
  // A functional `_foreach_` overload whose calls this entry splits into element calls
  // (foreach_route below): which arguments are lists, and its element ops by the kinds
  // of element 0's arguments (nullptr: the Python tracer takes such calls).
  bool foreach = false;
  std::vector<bool> list_args;
  // A view copy recorded as the one view its decomposition records (view_copies.py).
  // native_layer_norm: special_ops.py's route, which records the op whole and casts
  // the statistics where their dtype is not the input's (half types).
  enum class Direct : uint8_t {
    None, T, Transpose, Expand, UnsafeView, Unsqueeze, Identity, LayerNorm
  } direct = Direct::None;
  std::unordered_map<std::string, std::optional<c10::OperatorHandle>> elements;
  uint64_t checked = 0;  // `deregistered` when its name was last checked
};

// Ops deregistered so far (NewOps counts them): while it has not moved, a schema's
// address still names the op its OpInfo was made for, and op_info need not compare
// the names (two strings) on every call.
std::atomic<uint64_t> deregistered{0};

constexpr size_t kShapeCacheLimit = 1 << 16;

std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> ops;

Arg kind_of(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto optional = t->cast<c10::OptionalType>()) t = optional->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return Arg::Tensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return Arg::Int;
    case c10::TypeKind::FloatType: return Arg::Float;
    case c10::TypeKind::BoolType: return Arg::Bool;
    case c10::TypeKind::NumberType: return Arg::Scalar;
    case c10::TypeKind::ScalarTypeType: return Arg::Dtype;
    // (`ones_like(x, memory_format=torch.contiguous_format)`: autograd's gradient seed)
    case c10::TypeKind::LayoutType: return Arg::Layout;
    case c10::TypeKind::MemoryFormatType: return Arg::MemoryFormat;
    case c10::TypeKind::StringType: return Arg::Str;
    case c10::TypeKind::ListType: {
      auto element = t->castRaw<c10::ListType>()->getElementType()->kind();
      if (element == c10::TypeKind::IntType || element == c10::TypeKind::SymIntType) {
        return Arg::IntList;
      }
      // (`bool[3] output_mask`: native_layer_norm_backward's, keyed by value)
      if (element == c10::TypeKind::BoolType) return Arg::BoolList;
      // (`Tensor[]`: cat's; not `Tensor?[]`, index's, whose None items it does not take)
      if (element == c10::TypeKind::TensorType) return Arg::TensorList;
      return Arg::Other;
    }
    default: return Arg::Other;
  }
}

[[noreturn]] void raise_python_error() {
  python_error error;
  error.persist();
  throw error;
}

// A functional `_foreach_` overload returning one list of tensors, whose arguments are
// lists of tensors or of numbers, or numbers: each element call takes element k of
// every list and the other arguments as they are (the `.Tensor` overloads' scalar
// tensors hold one number per element: the Python tracer takes those).
void mark_foreach(const c10::FunctionSchema& schema, OpInfo& info) {
  if (schema.name().rfind("aten::_foreach_", 0) != 0 || schema.is_mutable() ||
      schema.returns().size() != 1 ||
      schema.returns()[0].real_type()->kind() != c10::TypeKind::ListType) {
    return;
  }
  bool any_list = false;
  for (const auto& argument : schema.arguments()) {
    c10::TypePtr t = argument.real_type();
    if (auto optional = t->cast<c10::OptionalType>()) t = optional->getElementType();
    bool list = t->kind() == c10::TypeKind::ListType;
    auto element = list ? t->castRaw<c10::ListType>()->getElementType()->kind() : t->kind();
    if (element != c10::TypeKind::TensorType && element != c10::TypeKind::NumberType &&
        element != c10::TypeKind::FloatType && element != c10::TypeKind::IntType) {
      return;
    }
    if (!list && element == c10::TypeKind::TensorType) return;  // a `.Tensor` overload
    info.list_args.push_back(list);
    any_list = any_list || list;
  }
  info.foreach = any_list;
}

// The view copies functionalization emits most (a GPT step: ~90 `t_copy` and
// `transpose_copy`, ~30 `detach_copy`), which the C++ entry records as
// tracing/view_copies.py and special_ops.py's `_identity` do (direct_route below).
void mark_direct(const c10::FunctionSchema& schema, OpInfo& info) {
  using D = OpInfo::Direct;
  static const std::unordered_map<std::string, D> table = {
      {"aten::t_copy", D::T},
      {"aten::transpose_copy.int", D::Transpose},
      {"aten::expand_copy", D::Expand},
      {"aten::_unsafe_view", D::UnsafeView},
      {"aten::unsqueeze_copy", D::Unsqueeze},
      {"aten::detach_copy", D::Identity},
      {"aten::alias_copy", D::Identity},
      {"aten::native_layer_norm", D::LayerNorm}};
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  auto found = table.find(name);
  if (found != table.end()) info.direct = found->second;
}

OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  auto found = ops.find(schema);
  if (found != ops.end()) {
    uint64_t now = deregistered.load(std::memory_order_acquire);
    if (found->second->checked == now) return *found->second;
    found->second->checked = now;
    if (*found->second->name == schema->operator_name()) return *found->second;
    ops.erase(found);  // (its Python objects leak: rare)
  }
  auto info = std::make_unique<OpInfo>();
  info->name = schema->operator_name();
  info->checked = deregistered.load(std::memory_order_acquire);
  py::handle func = torch::detail::getTorchApiFunction(op);
  info->func = func.ptr();
  Py_INCREF(info->func);
  PyObject* described = PyObject_CallOneArg(R.describe, info->func);
  if (described == nullptr) raise_python_error();
  info->leaf = PyObject_IsTrue(PyTuple_GET_ITEM(described, 0));
  info->lift = PyObject_IsTrue(PyTuple_GET_ITEM(described, 1));
  info->node_op = PyTuple_GET_ITEM(described, 2);
  Py_INCREF(info->node_op);
  Py_DECREF(described);
  const auto& arguments = schema->arguments();
  size_t start = arguments.size();
  while (start > 0 && arguments[start - 1].kwarg_only()) start--;
  info->kwarg_only_start = start;
  for (const auto& argument : arguments) {
    info->kinds.push_back(kind_of(argument.real_type()));
    info->names.push_back(PyUnicode_InternFromString(argument.name().c_str()));
  }
  // The fast path makes plain outputs only: no aliasing, no mutation, Tensor returns or
  // one `Tensor[]` return (split_copy's: the Python recorder's list of outputs).
  if (schema->is_mutable() || schema->returns().empty()) info->leaf = false;
  const auto& returns = schema->returns();
  if (returns.size() == 1 && returns[0].alias_info() == nullptr &&
      returns[0].real_type()->kind() == c10::TypeKind::ListType &&
      returns[0].real_type()->castRaw<c10::ListType>()->getElementType()->kind() ==
          c10::TypeKind::TensorType) {
    info->list_out = true;
  }
  for (const auto& ret : returns) {
    if (ret.alias_info() != nullptr ||
        (ret.real_type()->kind() != c10::TypeKind::TensorType && !info->list_out)) {
      info->leaf = false;
    }
  }
  for (const auto& argument : arguments) {
    if (argument.alias_info() != nullptr) info->leaf = false;
  }
  mark_foreach(*schema, *info);
  mark_direct(*schema, *info);
  return *ops.emplace(schema, std::move(info)).first->second;
}

// ------------------------------------------------------------ the fast path

thread_local std::string key_buffer;
thread_local int python_depth = 0;  // > 0 inside a call of the Python tracer
double fast_seconds = 0.0;          // tracing time of top-level fast-path ops (GIL held)
// Time in calls of the Python tracer made from a top-level fast-path op (a foreach
// call's elements): the Python tracer counts it itself.
thread_local double python_seconds = 0.0;
bool fast_path = true;              // off: every call goes to the Python tracer (tests)

inline void put(std::string& key, char tag, const void* data, size_t n) {
  key.push_back(tag);
  key.append(static_cast<const char*>(data), n);
}

inline bool int_of(const c10::IValue& v, int64_t* out) {
  if (v.isInt()) {
    *out = v.toInt();
    return true;
  }
  if (v.isSymInt()) {
    auto m = v.toSymInt().maybe_as_int();
    if (!m) return false;
    *out = *m;
    return true;
  }
  return false;
}

// Numbers in a key, as the Python recorder keys them.
inline void put_double(const OpInfo& info, double d, std::string& key) {
  if (info.lift) {
    key.push_back('F');  // a scalar graph input: its value is not in the key
  } else {
    put(key, 'd', &d, sizeof d);  // by bits: 0.0 and -0.0 differ
  }
}
inline void put_int(int64_t x, std::string& key) { put(key, 'i', &x, sizeof x); }
inline void put_bool(bool b, std::string& key) {
  char c = b ? 1 : 0;
  put(key, 'b', &c, 1);
}

// A wrapped number's key: as the Python number it is handed over as.
bool wrapped_key(const OpInfo& info, const at::Tensor& t, std::string& key) {
  switch (t.scalar_type()) {
    case at::ScalarType::Double: put_double(info, *t.const_data_ptr<double>(), key); return true;
    case at::ScalarType::Long: put_int(*t.const_data_ptr<int64_t>(), key); return true;
    case at::ScalarType::Bool: put_bool(*t.const_data_ptr<bool>(), key); return true;
    default: return false;  // (complex: the Python tracer)
  }
}

// The shape-cache key of a call (every argument, in order); false if the fast path
// does not take one of them.
bool build_key(const OpInfo& info, const c10::IValue* args, size_t n, std::string& key) {
  key.clear();
  for (size_t i = 0; i < n; i++) {
    const c10::IValue& v = args[i];
    if (v.isNone()) {
      key.push_back('N');
      continue;
    }
    switch (info.kinds[i]) {
      case Arg::Tensor: {
        if (!v.isTensor()) {
          // A foreach element's number (`_foreach_mul.Scalar`'s scalar as `mul.Tensor`'s
          // other): keyed as the wrapped number it stands for.
          if (v.isDouble()) {
            put_double(info, v.toDouble(), key);
          } else if (v.isInt()) {
            put_int(v.toInt(), key);
          } else if (v.isBool()) {
            put_bool(v.toBool(), key);
          } else {
            return false;
          }
          break;
        }
        const at::Tensor& t = v.toTensor();
        if (!t.defined()) {
          // An absent optional tensor as autograd passes it (nll_loss_backward's
          // weight): the Python tracer gets None for it.
          key.push_back('N');
          break;
        }
        LazyImpl* impl = lazy_impl(t);
        if (impl == nullptr && t.unsafeGetTensorImpl()->is_wrapped_number()) {
          // `x * 2.0`: the Python tracer gets the number (torch::jit::toPyObject's rule)
          if (!wrapped_key(info, t, key)) return false;
          break;
        }
        if (impl == nullptr || impl->value == nullptr) return false;  // a host tensor
        PyObject* sig = get_slot(impl->value, R.v_sig);
        long long s = PyLong_AsLongLong(sig);
        if (s == -1 && PyErr_Occurred()) {
          PyErr_Clear();
          return false;
        }
        put(key, 'T', &s, sizeof s);
        break;
      }
      case Arg::Int:
      case Arg::Dtype:
      case Arg::Layout:
      case Arg::MemoryFormat: {
        int64_t x;
        if (!int_of(v, &x)) return false;
        put_int(x, key);
        break;
      }
      case Arg::Float:
      case Arg::Scalar: {
        if (v.isDouble()) {
          put_double(info, v.toDouble(), key);
        } else if (v.isBool()) {
          put_bool(v.toBool(), key);
        } else {
          int64_t x;
          if (!int_of(v, &x)) return false;
          put_int(x, key);
        }
        break;
      }
      case Arg::Bool: {
        if (!v.isBool()) return false;
        put_bool(v.toBool(), key);
        break;
      }
      case Arg::IntList: {  // (int[] and SymInt[]: lists of IValues either way)
        if (!v.isList()) return false;
        const auto& list = v.toListRef();
        int64_t size = list.size();
        put(key, 'L', &size, sizeof size);
        for (const auto& e : list) {
          int64_t x;
          if (!int_of(e, &x)) return false;
          key.append(reinterpret_cast<const char*>(&x), sizeof x);
        }
        break;
      }
      case Arg::BoolList: {
        if (!v.isList()) return false;
        const auto& list = v.toListRef();
        int64_t size = list.size();
        put(key, 'B', &size, sizeof size);
        for (const auto& e : list) {
          if (!e.isBool()) return false;
          key.push_back(e.toBool() ? 1 : 0);
        }
        break;
      }
      case Arg::TensorList: {  // lazy tensors only (a host tensor: the Python tracer)
        if (!v.isTensorList()) return false;
        const auto& list = v.toListRef();
        int64_t size = list.size();
        put(key, 'l', &size, sizeof size);
        for (const auto& e : list) {
          if (!e.isTensor()) return false;
          LazyImpl* impl = lazy_impl(e.toTensor());
          if (impl == nullptr || impl->value == nullptr) return false;
          long long s = PyLong_AsLongLong(get_slot(impl->value, R.v_sig));
          if (s == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return false;
          }
          key.append(reinterpret_cast<const char*>(&s), sizeof s);
        }
        break;
      }
      case Arg::Str: {
        if (!v.isString()) return false;
        const std::string& text = v.toStringRef();
        int64_t size = text.size();
        put(key, 's', &size, sizeof size);
        key.append(text);
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

// An argument as the Node holds it (new reference): a LazyValue for a tensor, Python
// numbers, a list of ints, a dtype. Only for arguments build_key took.
PyObject* node_arg(const OpInfo& info, size_t i, const c10::IValue& v) {
  if (v.isNone()) Py_RETURN_NONE;
  switch (info.kinds[i]) {
    case Arg::Tensor: {
      if (v.isDouble()) return PyFloat_FromDouble(v.toDouble());  // a foreach element's
      if (v.isInt()) return PyLong_FromLongLong(v.toInt());        // number (build_key)
      if (v.isBool()) return PyBool_FromLong(v.toBool());
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) Py_RETURN_NONE;  // (an absent optional tensor: build_key)
      LazyImpl* impl = lazy_impl(t);
      if (impl == nullptr) {  // a wrapped number (wrapped_key took it)
        switch (t.scalar_type()) {
          case at::ScalarType::Double: return PyFloat_FromDouble(*t.const_data_ptr<double>());
          case at::ScalarType::Long: return PyLong_FromLongLong(*t.const_data_ptr<int64_t>());
          default: return PyBool_FromLong(*t.const_data_ptr<bool>());
        }
      }
      Py_INCREF(impl->value);
      return impl->value;
    }
    case Arg::Dtype: {
      int64_t x;
      int_of(v, &x);
      PyObject* dtype = reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(x)));
      Py_INCREF(dtype);
      return dtype;
    }
    case Arg::Layout: {  // (as to_python boxes it)
      PyObject* o = reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt())));
      Py_INCREF(o);
      return o;
    }
    case Arg::MemoryFormat: {  // (a borrowed reference)
      PyObject* o = torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt()));
      Py_INCREF(o);
      return o;
    }
    case Arg::TensorList: {  // a list of LazyValues, as the Python recorder's _encode makes
      const auto& items = v.toListRef();
      PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
      if (list == nullptr) return nullptr;
      for (size_t k = 0; k < items.size(); k++) {
        PyObject* value = lazy_impl(items[k].toTensor())->value;
        Py_INCREF(value);
        PyList_SET_ITEM(list, k, value);
      }
      return list;
    }
    case Arg::IntList: {
      const auto& items = v.toListRef();
      PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
      if (list == nullptr) return nullptr;
      for (size_t k = 0; k < items.size(); k++) {
        int64_t x;
        int_of(items[k], &x);
        PyList_SET_ITEM(list, k, PyLong_FromLongLong(x));
      }
      return list;
    }
    case Arg::BoolList: {
      const auto& items = v.toListRef();
      PyObject* list = PyList_New(static_cast<Py_ssize_t>(items.size()));
      if (list == nullptr) return nullptr;
      for (size_t k = 0; k < items.size(); k++) PyList_SET_ITEM(list, k, PyBool_FromLong(items[k].toBool()));
      return list;
    }
    case Arg::Str: {
      const std::string& text = v.toStringRef();
      return PyUnicode_FromStringAndSize(text.data(), static_cast<Py_ssize_t>(text.size()));
    }
    default: {
      if (v.isDouble()) return PyFloat_FromDouble(v.toDouble());
      if (v.isBool()) return PyBool_FromLong(v.toBool());
      int64_t x;
      int_of(v, &x);
      return PyLong_FromLongLong(x);
    }
  }
}

// Whether argument i holds its default (PyTorch's Python boxing leaves such trailing
// positional and keyword arguments out; the Node must hold what the Python tracer
// would have been given).
inline bool is_default(const c10::FunctionSchema& schema, size_t i, const c10::IValue& v) {
  const auto& d = schema.arguments()[i].default_value();
  return d.has_value() && *d == v;
}

// A call's (args, kwargs) as PyTorch's Python dispatch boxes it
// (parseIValuesToPyArgsKwargs): positional arguments up to the last one not at its
// default, keyword-only ones not at their defaults. `convert(i, value)` makes each (a
// new reference, nullptr with a Python error set); `no_kwargs`, when given, is used
// (shared) for a call without keyword arguments, else a new dict. New references;
// false with a Python error set.
template <typename Convert>
bool box_arguments(const OpInfo& info, const c10::FunctionSchema& schema, const c10::IValue* args,
                   size_t n, Convert&& convert, PyObject* no_kwargs, PyObject** out_args,
                   PyObject** out_kwargs) {
  size_t positional = info.kwarg_only_start;
  while (positional > 0 && is_default(schema, positional - 1, args[positional - 1])) positional--;
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(positional));
  if (tuple == nullptr) return false;
  for (size_t i = 0; i < positional; i++) {
    PyObject* a = convert(i, args[i]);
    if (a == nullptr) {
      Py_DECREF(tuple);
      return false;
    }
    PyTuple_SET_ITEM(tuple, i, a);
  }
  PyObject* kwargs = nullptr;
  for (size_t i = info.kwarg_only_start; i < n; i++) {
    if (is_default(schema, i, args[i])) continue;
    if (kwargs == nullptr) kwargs = PyDict_New();
    PyObject* a = kwargs == nullptr ? nullptr : convert(i, args[i]);
    if (a == nullptr || PyDict_SetItem(kwargs, info.names[i], a) < 0) {
      Py_XDECREF(a);
      Py_XDECREF(kwargs);
      Py_DECREF(tuple);
      return false;
    }
    Py_DECREF(a);
  }
  if (kwargs == nullptr) {
    kwargs = no_kwargs != nullptr ? no_kwargs : PyDict_New();
    if (kwargs == nullptr) {
      Py_DECREF(tuple);
      return false;
    }
    if (no_kwargs != nullptr) Py_INCREF(kwargs);
  }
  *out_args = tuple;
  *out_kwargs = kwargs;
  return true;
}

// The Node's (args, kwargs): what the Python tracer would have been given, with
// LazyValues where tensors are.
bool node_arguments(const OpInfo& info, const c10::FunctionSchema& schema, const c10::IValue* args,
                    size_t n, PyObject** out_args, PyObject** out_kwargs) {
  auto convert = [&](size_t i, const c10::IValue& v) { return node_arg(info, i, v); };
  return box_arguments(info, schema, args, n, convert, R.no_kwargs, out_args, out_kwargs);
}

// The shape-cache entry of a call not seen before, from the Python recorder's meta
// inference (nullptr, no error set: the Python tracer must take the call).
ShapeEntry* infer_entry(OpInfo& info, const std::string& key, PyObject* args, PyObject* kwargs) {
  PyObject* got = PyObject_CallFunctionObjArgs(R.infer, info.func, args, kwargs, nullptr);
  if (got == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (got == Py_None) {
    Py_DECREF(got);
    return nullptr;
  }
  // (metas, token, ((meta, sig), ...))
  ShapeEntry entry;
  entry.metas = PyTuple_GET_ITEM(got, 0);
  entry.token = PyTuple_GET_ITEM(got, 1);
  PyObject* outputs = PyTuple_GET_ITEM(got, 2);
  Py_INCREF(entry.metas);
  Py_INCREF(entry.token);
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(outputs); k++) {
    PyObject* out = PyTuple_GET_ITEM(outputs, k);
    Output o;
    o.meta = PyTuple_GET_ITEM(out, 0);
    o.sig = PyTuple_GET_ITEM(out, 1);
    Py_INCREF(o.meta);
    Py_INCREF(o.sig);
    const at::Tensor& meta = THPVariable_Unpack(o.meta);
    o.sizes = meta.sizes().vec();
    o.dtype = meta.dtype();
    entry.outputs.push_back(std::move(o));
  }
  Py_DECREF(got);
  if (info.shapes.size() >= kShapeCacheLimit) info.shapes.clear();  // (entries leak: rare)
  return &info.shapes.emplace(key, std::move(entry)).first->second;
}

// A new Node or LazyValue, untracked by Python's garbage collector. A step makes
// thousands (a GPT step: ~1,700), all alive until its graph runs: tracked, they made
// every young collection walk them and, promoted to the oldest generation, brought
// full collections (every object of the process: torch's, torch-mlir's) every few
// dozen steps, ~10% of a GPT step's CPU time (benchmarks/step_gc.py). They hold no
// reference cycle a collection would have to break: a Node holds its arguments'
// values (earlier nodes' outputs), a value its Node, its data, its run (whose
// reference back is dropped when the run binds or fails) and a traceback-less error.
PyObject* new_object(PyTypeObject* type) {
  PyObject* object = type->tp_alloc(type, 0);
  if (object != nullptr) PyObject_GC_UnTrack(object);
  return object;
}

// Records the call on the stack if the fast path takes it; false leaves the stack as it
// was, with no Python error set.
bool record_fast(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  size_t n = schema.arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  std::string& key = key_buffer;
  if (!build_key(info, args, n, key)) return false;
  PyObject* node_args;
  PyObject* node_kwargs;
  auto found = info.shapes.find(key);
  ShapeEntry* entry = found == info.shapes.end() ? nullptr : &found->second;
  if (!node_arguments(info, schema, args, n, &node_args, &node_kwargs)) {
    PyErr_Clear();
    return false;
  }
  if (entry == nullptr) {
    std::string missed = key;  // (the Python call may trace, reusing the buffer)
    entry = infer_entry(info, missed, node_args, node_kwargs);
    if (entry == nullptr || (!info.list_out && entry->outputs.size() != schema.returns().size())) {
      Py_DECREF(node_args);
      Py_DECREF(node_kwargs);
      return false;
    }
  }
  PyObject* seq = PyIter_Next(R.node_ids);
  PyObject* node = new_object(R.node);
  if (seq == nullptr || node == nullptr) {
    Py_XDECREF(seq);
    Py_XDECREF(node);
    Py_DECREF(node_args);
    Py_DECREF(node_kwargs);
    PyErr_Clear();
    return false;
  }
  Py_INCREF(info.node_op);
  set_slot(node, R.n_op, info.node_op);
  set_slot(node, R.n_args, node_args);
  set_slot(node, R.n_kwargs, node_kwargs);
  Py_INCREF(entry->metas);
  set_slot(node, R.n_out_metas, entry->metas);
  set_slot(node, R.n_seq, seq);
  Py_INCREF(entry->token);
  set_slot(node, R.n_static, entry->token);
  std::vector<at::Tensor> outputs;
  outputs.reserve(entry->outputs.size());
  for (size_t k = 0; k < entry->outputs.size(); k++) {
    const Output& out = entry->outputs[k];
    PyObject* value = new_object(R.lazy_value);
    if (value == nullptr) {
      Py_DECREF(node);
      raise_python_error();
    }
    Py_INCREF(out.meta);
    set_slot(value, R.v_meta, out.meta);
    Py_INCREF(node);
    set_slot(value, R.v_node, node);
    set_slot(value, R.v_index, PyLong_FromSize_t(k));
    Py_INCREF(Py_None);
    set_slot(value, R.v_data, Py_None);
    Py_INCREF(Py_None);
    set_slot(value, R.v_error, Py_None);
    Py_INCREF(out.sig);
    set_slot(value, R.v_sig, out.sig);
    Py_INCREF(Py_None);
    set_slot(value, R.v_run, Py_None);
    outputs.push_back(make_tensor(out.sizes, out.dtype, value));
  }
  Py_DECREF(node);
  torch::jit::drop(*stack, n);
  if (info.list_out) {
    c10::List<at::Tensor> list;
    list.reserve(outputs.size());
    for (auto& t : outputs) list.push_back(std::move(t));
    stack->emplace_back(std::move(list));
  } else {
    for (auto& t : outputs) stack->emplace_back(std::move(t));
  }
  return true;
}

// ------------------------------------------------------------ the Python tracer

PyObject* to_python(const c10::Argument& argument, const c10::IValue& v) {
  if (v.isNone()) Py_RETURN_NONE;
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (lazy_impl(t) != nullptr) return wrap(t);
    // (toPyObject hands a wrapped number, `x * 2.0`'s 2.0, over as the Python number)
  }
  if (v.isList()) {  // a list holding tensors: item by item (its lazy tensors as above)
    const auto& list = v.toListRef();
    bool tensors = false;
    for (const auto& e : list) tensors = tensors || e.isTensor();
    if (tensors) {
      PyObject* out = PyList_New(static_cast<Py_ssize_t>(list.size()));
      if (out == nullptr) return nullptr;
      for (size_t k = 0; k < list.size(); k++) {
        PyObject* item = to_python(argument, list[k]);
        if (item == nullptr) {
          Py_DECREF(out);
          return nullptr;
        }
        PyList_SET_ITEM(out, k, item);
      }
      return out;
    }
  }
  // As PyTorch's Python dispatch boxes them (parseIValuesToPyArgsKwargs).
  c10::TypePtr type = argument.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType: {
      PyObject* o = reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt())));
      Py_INCREF(o);
      return o;
    }
    case c10::TypeKind::LayoutType: {
      PyObject* o = reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt())));
      Py_INCREF(o);
      return o;
    }
    case c10::TypeKind::MemoryFormatType: {
      PyObject* o = torch::utils::getTHPMemoryFormat(static_cast<c10::MemoryFormat>(v.toInt()));
      Py_INCREF(o);
      return o;
    }
    default:
      break;
  }
  try {
    return torch::jit::toPyObject(v).release().ptr();
  } catch (py::error_already_set& error) {
    error.restore();
    return nullptr;
  }
}

// Calls the Python tracer with the call on the stack, boxed as PyTorch's Python
// dispatch boxes it, and pushes its outputs.
void call_python(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  size_t n = schema.arguments().size();
  auto arguments = torch::jit::pop(*stack, n);
  PyObject* args;
  PyObject* kwargs;
  auto convert = [&](size_t i, const c10::IValue& v) { return to_python(schema.arguments()[i], v); };
  if (!box_arguments(info, schema, arguments.data(), n, convert, nullptr, &args, &kwargs)) {
    raise_python_error();
  }
  // The routes run under the dispatch state the call arrived with: functionalization's
  // and autograd's keys excluded, as PyTorch's Python key gave them (its snapshot was
  // taken below the wrapper's autograd and functionalization kernels too).
  auto began = std::chrono::steady_clock::now();
  python_depth++;
  PyObject* out = PyObject_CallFunctionObjArgs(R.entry, info.func, args, kwargs, nullptr);
  python_depth--;
  if (python_depth == 0) {
    python_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  }
  Py_DECREF(args);
  Py_DECREF(kwargs);
  if (out == nullptr) raise_python_error();
  py::object result = py::reinterpret_steal<py::object>(out);
  const auto& returns = schema.returns();
  try {
    if (returns.size() == 1) {
      stack->push_back(torch::jit::toIValue(result, returns[0].real_type()));
    } else if (returns.size() > 1) {
      auto outs = py::cast<py::sequence>(result);
      TORCH_CHECK(outs.size() == returns.size(), "lazy_mlir: ", schema.name(), " returned ",
                  outs.size(), " values, its schema says ", returns.size());
      for (size_t k = 0; k < returns.size(); k++) {
        stack->push_back(torch::jit::toIValue(outs[k], returns[k].real_type()));
      }
    }
  } catch (py::error_already_set& error) {
    error.restore();
    raise_python_error();
  }
}

// ------------------------------------------------------------ direct view copies
// What tracing/view_copies.py records for `t_copy`, `transpose_copy`, `expand_copy` and
// `_unsafe_view` (the one view their decompositions record: a `permute`, an `alias`, an
// `expand`, a `view`, through the `*_copy` op whose Node records that view), what
// `unsqueeze_copy`'s decomposition records (one `unsqueeze`), and what
// special_ops.py's `_identity` does for `detach_copy` and `alias_copy` (a new inner
// tensor of the same value), and what special_ops.py's `_layer_norm` records (the op,
// and casts of a half input's statistics), without a Python frame. A call these do not
// cover (an unusual argument, an out-of-range dim) goes to the Python tracer, which
// records it or raises eager's error.

c10::OperatorHandle view_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// Records `target(args...)` for the call on the stack (replaced by it); false (the
// stack as it was) if the fast path does not take it.
bool record_as(const c10::OperatorHandle& target, std::vector<c10::IValue> args,
               torch::jit::Stack* stack, size_t n) {
  auto original = torch::jit::pop(*stack, n);
  for (auto& a : args) stack->push_back(std::move(a));
  if (record_fast(target, op_info(target), stack)) return true;
  torch::jit::drop(*stack, args.size());
  for (auto& a : original) stack->push_back(std::move(a));
  return false;
}

// special_ops._layer_norm: the op, and where the meta kernel's mean and rstd are not of
// the input's dtype (float32 for a half input; eager CPU returns them in its dtype),
// a `_to_copy` of each to it, mean first (the Nodes, in order, the Python route makes).
bool layer_norm_route(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack,
                      at::ScalarType dtype) {
  static const c10::OperatorHandle to_copy = view_op("aten::_to_copy");
  if (!record_fast(op, info, stack)) return false;
  size_t top = stack->size();  // (out, mean, rstd)
  if ((*stack)[top - 2].toTensor().scalar_type() == dtype &&
      (*stack)[top - 1].toTensor().scalar_type() == dtype) {
    return true;
  }
  OpInfo& cast_info = op_info(to_copy);
  auto stats = torch::jit::pop(*stack, 2);
  for (auto& s : stats) {
    if (s.toTensor().scalar_type() == dtype) {
      stack->push_back(std::move(s));
      continue;
    }
    // _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format)
    stack->push_back(std::move(s));
    stack->emplace_back(static_cast<int64_t>(dtype));
    for (int k = 0; k < 3; k++) stack->emplace_back();
    stack->emplace_back(false);
    stack->emplace_back();
    // (a lazy tensor to a floating dtype: its key and meta inference take every such cast)
    TORCH_CHECK(record_fast(to_copy, cast_info, stack),
                "lazy_mlir: layer norm's statistics could not be cast to ", dtype);
  }
  return true;
}

bool direct_route(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack) {
  using D = OpInfo::Direct;
  static const c10::OperatorHandle permute = view_op("aten::permute_copy");
  static const c10::OperatorHandle alias = view_op("aten::alias_copy");
  static const c10::OperatorHandle view = view_op("aten::view_copy");
  size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  if (!args[0].isTensor()) return false;
  at::Tensor x = args[0].toTensor();
  LazyImpl* impl = lazy_impl(x);
  if (impl == nullptr || impl->value == nullptr) return false;
  int64_t rank = x.dim();
  switch (info.direct) {
    case D::Identity: {
      if (n != 1) return false;
      Py_INCREF(impl->value);
      at::Tensor out = make_tensor(x.sizes(), x.dtype(), impl->value);
      torch::jit::drop(*stack, n);
      stack->emplace_back(std::move(out));
      return true;
    }
    case D::T:
      if (rank < 2) return record_as(alias, {x}, stack, n);
      return record_as(permute, {x, c10::List<int64_t>({1, 0})}, stack, n);
    case D::Transpose: {
      if (!args[1].isInt() || !args[2].isInt() || rank == 0) return false;
      int64_t first = args[1].toInt(), second = args[2].toInt();
      if (first < -rank || first >= rank || second < -rank || second >= rank) return false;
      first = (first + rank) % rank;
      second = (second + rank) % rank;
      if (first == second) return record_as(alias, {x}, stack, n);
      c10::List<int64_t> dims;
      for (int64_t d = 0; d < rank; d++) dims.push_back(d);
      dims.set(first, second);
      dims.set(second, first);
      return record_as(permute, {x, dims}, stack, n);
    }
    case D::Expand:  // (`implicit=True`: the Python route's decomposition)
      if (!args[2].isBool() || args[2].toBool()) return false;
      return record_fast(op, info, stack);  // (expand_copy's Node records `expand`)
    case D::UnsafeView:
      return record_as(view, {x, args[1]}, stack, n);
    case D::Unsqueeze:
      // Its decomposition records `unsqueeze` with the same dim (one out of range: the
      // meta inference refuses it, and the Python tracer raises eager's error).
      return record_fast(op, info, stack);
    case D::LayerNorm:
      return layer_norm_route(op, info, stack, x.scalar_type());
    default:
      return false;
  }
}

// ------------------------------------------------------------ foreach ops
// Optimizers call `_foreach_` ops (an AdamW step: ~8 per step over every parameter);
// functionalization hands us their functional forms. Each becomes one element call
// per list element, as the Python tracer's foreach route makes them
// (tracing/functional.py), but here: an element op whose route is its recorder is
// recorded by the fast path, any other goes to the Python tracer, element by element.

// The element op of foreach op `info` for calls whose element 0 is `element` (the
// arguments' kinds key the cache), or nullptr: the Python tracer takes the call.
const c10::OperatorHandle* element_op(const c10::OperatorHandle& op, OpInfo& info,
                                      const std::vector<c10::IValue>& element) {
  std::string kinds;
  for (const auto& v : element) {
    kinds.push_back(v.isTensor() ? 'T' : v.isDouble() ? 'd' : v.isInt() ? 'i' : v.isBool() ? 'b'
                    : v.isNone() ? 'N' : 'o');
  }
  auto found = info.elements.find(kinds);
  if (found != info.elements.end()) return found->second ? &*found->second : nullptr;
  std::optional<c10::OperatorHandle> resolved;
  const auto& schema = op.schema();
  PyObject* args;
  PyObject* kwargs;
  auto convert = [&](size_t i, const c10::IValue& v) { return to_python(schema.arguments()[i], v); };
  if (R.element_op != nullptr &&
      box_arguments(info, schema, element.data(), element.size(), convert, nullptr, &args, &kwargs)) {
    PyObject* got = PyObject_CallFunctionObjArgs(R.element_op, info.func, args, kwargs, nullptr);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    if (got != nullptr && got != Py_None) {
      // (qualified name, overload name)
      const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(got, 0));
      const char* overload = PyUnicode_AsUTF8(PyTuple_GET_ITEM(got, 1));
      if (name != nullptr && overload != nullptr) {
        resolved = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
      }
    }
    Py_XDECREF(got);
  }
  PyErr_Clear();
  if (resolved) {
    // Element calls pass the foreach call's arguments position by position, and the
    // element op's defaults for the rest: its schema must take them so.
    const auto& args_of = resolved->schema().arguments();
    const auto& foreach_args = schema.arguments();
    bool fits = args_of.size() >= foreach_args.size() && resolved->schema().returns().size() == 1 &&
                !resolved->schema().is_mutable();
    for (size_t i = 0; fits && i < args_of.size(); i++) {
      if (i >= foreach_args.size()) {
        fits = args_of[i].default_value().has_value();
      } else if (foreach_args[i].kwarg_only()) {  // (`alpha`)
        fits = args_of[i].kwarg_only() && args_of[i].name() == foreach_args[i].name();
      }  // (a positional one may be a keyword of the element op: addcmul's `value`)
    }
    if (!fits) resolved.reset();
  }
  auto& slot = info.elements[kinds];
  slot = resolved;
  return slot ? &*slot : nullptr;
}

// Splits the functional foreach call on the stack into element calls and pushes their
// results; false (the stack as it was) if the Python tracer must take it.
bool foreach_route(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  size_t n = schema.arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  size_t count = 0;
  bool seen = false;
  for (size_t i = 0; i < n; i++) {
    if (!info.list_args[i]) continue;
    if (!args[i].isList()) return false;
    size_t size = args[i].toListRef().size();
    if (seen && size != count) return false;  // (the Python tracer raises PyTorch's error)
    count = size;
    seen = true;
  }
  if (count == 0) return false;
  std::vector<c10::IValue> element(n);
  for (size_t i = 0; i < n; i++) element[i] = info.list_args[i] ? args[i].toListRef()[0] : args[i];
  const c10::OperatorHandle* element_handle = element_op(op, info, element);
  if (element_handle == nullptr) return false;
  OpInfo& element_info = op_info(*element_handle);
  const auto& element_args = element_handle->schema().arguments();
  // (element calls push onto the same stack, which may move: the call's own arguments
  // are taken off it first)
  auto arguments = torch::jit::pop(*stack, n);
  c10::List<at::Tensor> results;
  results.reserve(count);
  for (size_t k = 0; k < count; k++) {
    for (size_t i = 0; i < n; i++) {
      stack->push_back(info.list_args[i] ? arguments[i].toListRef()[k] : arguments[i]);
    }
    for (size_t i = n; i < element_args.size(); i++) stack->push_back(*element_args[i].default_value());
    if (!(element_info.leaf && fast_path && record_fast(*element_handle, element_info, stack))) {
      call_python(*element_handle, element_info, stack);
    }
    results.push_back(stack->back().toTensor());
    stack->pop_back();
  }
  stack->emplace_back(std::move(results));
  return true;
}

// ------------------------------------------------------------ the kernel

std::vector<std::unique_ptr<torch::Library>> libraries;
std::unordered_map<std::string, torch::Library*> library_of_namespace;

// Registers `entry` as op `name`'s PrivateUse1 kernel where it has none of its own and
// is not composite-implicit (those decompose above the backend; a kernel here would
// also take their autograd away: the math kernel serves the Autograd key only where
// the backend has none). Whether it registered.
bool register_op(const c10::OperatorName& name) {
  auto handle = c10::Dispatcher::singleton().findOp(name);
  if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
      handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    return false;
  }
  auto separator = name.name.find("::");
  if (separator == std::string::npos) return false;
  std::string ns = name.name.substr(0, separator);
  auto found = library_of_namespace.find(ns);
  torch::Library* library;
  if (found == library_of_namespace.end()) {
    libraries.push_back(std::make_unique<torch::Library>(
        torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__));
    library = libraries.back().get();
    library_of_namespace.emplace(ns, library);
  } else {
    library = found->second;
  }
  std::string op_name = name.name.substr(separator + 2);
  if (!name.overload_name.empty()) op_name += "." + name.overload_name;
  library->impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&entry>());
  return true;
}

// Ops registered after register_kernels (a custom op, an extension loaded later) are
// noted by a dispatcher listener, which runs under the dispatcher's lock (so cannot
// register a kernel itself), and get the kernel at the next call of `entry`: by then a
// custom op's own kernels are registered too, so a composite-implicit one is left alone.
std::mutex pending_mutex;
std::vector<c10::OperatorName> pending;
std::atomic<bool> has_pending{false};

struct NewOps final : public c10::OpRegistrationListener {
  void onOperatorRegistered(const c10::OperatorHandle& op) override {
    std::lock_guard<std::mutex> lock(pending_mutex);
    pending.push_back(op.operator_name());
    has_pending = true;
  }
  void onOperatorDeregistered(const c10::OperatorHandle&) override {
    deregistered.fetch_add(1, std::memory_order_release);
  }
};
std::optional<c10::RegistrationHandleRAII> listening;

void register_pending() {
  std::vector<c10::OperatorName> names;
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    names.swap(pending);
    has_pending = false;
  }
  for (const auto& name : names) register_op(name);
}

bool any_lazy(const c10::IValue& v) {
  if (v.isTensor()) return lazy_impl(v.toTensor()) != nullptr;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) {
      if (lazy_impl(t) != nullptr) return true;
    }
    return false;
  }
  if (v.isList()) {
    for (const auto& e : v.toListRef()) {
      if (any_lazy(e)) return true;
    }
  }
  return false;
}

// A call without an inner lazy tensor: one the dispatcher sent here by a device
// argument (BackendSelect: `cpu.to("lazy_mlir")`, `torch.zeros(n, device=...)`) or a
// wrapper reaching the backend with Functionalize excluded. It gets the kernel it had
// before `entry` was registered: the op's composite kernel, else PyTorch's error.
void call_default(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  for (auto key : {c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
                   c10::DispatchKey::CompositeExplicitAutograd,
                   c10::DispatchKey::CompositeImplicitAutograd}) {
    if (op.hasKernelForDispatchKey(key)) {
      op.callBoxedForDispatchKey(key, *stack);
      return;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.schema().operator_name(),
                              "' with arguments from the 'lazy_mlir' backend.");
}

void entry(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK(configured, "lazy_mlir: the tracer is not set up (import lazymlir first)");
  if (has_pending) register_pending();
  {
    size_t n = op.schema().arguments().size();
    const c10::IValue* args = stack->data() + stack->size() - n;
    bool lazy = false;
    for (size_t i = 0; i < n && !lazy; i++) lazy = any_lazy(args[i]);
    if (!lazy) {
      call_default(op, stack);
      return;
    }
  }
  if (!python_alive()) TORCH_CHECK(false, "lazy_mlir: Python is shutting down");
  Gil gil;
  OpInfo& info = op_info(op);
  if ((info.leaf || info.foreach || info.direct != OpInfo::Direct::None) && fast_path) {
    auto began = std::chrono::steady_clock::now();
    double in_python = python_seconds;
    if (info.leaf      ? record_fast(op, info, stack)
        : info.foreach ? foreach_route(op, info, stack)
                       : direct_route(op, info, stack)) {
      if (python_depth == 0) {
        fast_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() -
                        (python_seconds - in_python);
      }
      return;
    }
  }
  call_python(op, info, stack);
}


// ------------------------------------------------------------ in-place foreach meta check
// Functionalization runs an in-place op on meta tensors before it records the
// functional form, to raise the errors only the in-place form has (a broadcast that
// would grow `self`, a result dtype that cannot be cast back). In-place `_foreach_` ops
// have no Meta kernel: their composite kernel runs per element the Python reference
// meta kernels (~100 us an element). When every tensor of an element has its `self`'s
// shape and floating dtype and every number is real, the in-place op cannot fail those
// checks: this kernel returns at once; otherwise it runs the composite kernel
// (tracing/foreach_meta.py lists the ops).

std::unique_ptr<torch::Library> foreach_meta_library;
std::atomic<int64_t> foreach_meta_counts[2];  // [trivially valid, composite]

inline bool real_number(const c10::IValue& v) { return v.isDouble() || v.isInt() || v.isBool(); }

inline bool floating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool foreach_trivially_valid(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack.data() + stack.size() - n;
  if (n == 0 || !args[0].isList()) return false;
  const auto& selfs = args[0].toListRef();
  for (const auto& v : selfs) {
    if (!v.isTensor()) return false;
    const at::Tensor& t = v.toTensor();
    if (!floating(t.scalar_type()) || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
      return false;
    }
  }
  for (size_t i = 1; i < n; i++) {
    if (real_number(args[i])) continue;
    if (!args[i].isList()) return false;  // a single tensor (`.Tensor` overloads), None...
    const auto& list = args[i].toListRef();
    if (list.size() != selfs.size()) return false;
    for (size_t k = 0; k < list.size(); k++) {
      if (real_number(list[k])) continue;
      if (!list[k].isTensor()) return false;
      const at::Tensor& t = list[k].toTensor();
      const at::Tensor& self = selfs[k].toTensor();
      if (t.scalar_type() != self.scalar_type() ||
          t.unsafeGetTensorImpl()->has_symbolic_sizes_strides() || t.sizes() != self.sizes()) {
        return false;
      }
    }
  }
  return true;
}

void foreach_meta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (foreach_trivially_valid(op, *stack)) {
    foreach_meta_counts[0]++;
    torch::jit::drop(*stack, op.schema().arguments().size());  // (in-place: no returns)
    return;
  }
  foreach_meta_counts[1]++;
  op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
}

// install_foreach_meta([name, ...]) -> how many Meta kernels it registered ("aten::x_.y"
// names; ops missing here, or with a Meta kernel of their own, are skipped).
// uninstall_foreach_meta() removes them (benchmarks compare with PyTorch's own path).
PyObject* install_foreach_meta(PyObject*, PyObject* names) {
  HANDLE_TH_ERRORS
  if (foreach_meta_library) return PyLong_FromLong(0);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                  c10::DispatchKey::Meta, __FILE__, __LINE__);
  long count = 0;
  py::list list = py::reinterpret_borrow<py::list>(names);
  for (const auto& item : list) {
    std::string qualified = py::cast<std::string>(item);
    auto dot = qualified.find('.');
    std::string name = qualified.substr(0, dot);
    std::string overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
    if (overload == "default") overload = "";  // (Python's name of the unnamed overload)
    auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
    if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::Meta) ||
        !handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) {
      continue;
    }
    std::string unqualified = name.substr(std::string("aten::").size());
    if (!overload.empty()) unqualified += "." + overload;
    library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_meta>());
    count++;
  }
  foreach_meta_library = std::move(library);
  return PyLong_FromLong(count);
  END_HANDLE_TH_ERRORS
}

PyObject* uninstall_foreach_meta(PyObject*, PyObject*) {
  foreach_meta_library.reset();
  Py_RETURN_NONE;
}

// foreach_meta_counts() -> (calls found trivially valid, calls given to the composite).
PyObject* foreach_meta_stats(PyObject*, PyObject*) {
  return Py_BuildValue("(LL)", static_cast<long long>(foreach_meta_counts[0].load()),
                       static_cast<long long>(foreach_meta_counts[1].load()));
}

// ------------------------------------------------------------ the module

PyObject* configure(PyObject*, PyObject* args) {
  PyObject *lazy_tensor, *lazy_value, *node, *node_ids, *entry_fn, *describe, *infer, *globals,
      *no_kwargs;
  if (!PyArg_ParseTuple(args, "OOOOOOOOO", &lazy_tensor, &lazy_value, &node, &node_ids, &entry_fn,
                        &describe, &infer, &globals, &no_kwargs)) {
    return nullptr;
  }
  try {
    R.lazy_tensor = reinterpret_cast<PyTypeObject*>(lazy_tensor);
    R.lazy_value = reinterpret_cast<PyTypeObject*>(lazy_value);
    R.node = reinterpret_cast<PyTypeObject*>(node);
    for (PyObject* o : {lazy_tensor, lazy_value, node, node_ids, entry_fn, describe, infer, globals,
                        no_kwargs}) {
      Py_INCREF(o);
    }
    R.node_ids = node_ids;
    R.entry = entry_fn;
    R.describe = describe;
    R.infer = infer;
    R.session_globals = globals;
    R.current_name = PyUnicode_InternFromString("_current");
    R.no_kwargs = no_kwargs;
    R.v_meta = slot_offset(R.lazy_value, "meta");
    R.v_node = slot_offset(R.lazy_value, "node");
    R.v_index = slot_offset(R.lazy_value, "index");
    R.v_data = slot_offset(R.lazy_value, "data");
    R.v_error = slot_offset(R.lazy_value, "error");
    R.v_sig = slot_offset(R.lazy_value, "sig");
    R.v_run = slot_offset(R.lazy_value, "run");
    R.n_op = slot_offset(R.node, "op");
    R.n_args = slot_offset(R.node, "args");
    R.n_kwargs = slot_offset(R.node, "kwargs");
    R.n_out_metas = slot_offset(R.node, "out_metas");
    R.n_seq = slot_offset(R.node, "seq");
    R.n_static = slot_offset(R.node, "static");
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  configured = true;
  Py_RETURN_NONE;
}

// configure_foreach(element_op): `element_op(func, args, kwargs)` -> (name, overload) of
// the element op of foreach op `func` called with element 0's arguments, or None.
PyObject* configure_foreach(PyObject*, PyObject* element_op) {
  Py_INCREF(element_op);
  Py_XDECREF(R.element_op);
  R.element_op = element_op;
  Py_RETURN_NONE;
}

// Registers `entry` for every op that has no PrivateUse1 kernel yet, and as the
// backend fallback; returns how many kernels it registered.
PyObject* register_kernels(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  if (!libraries.empty()) return PyLong_FromLong(0);  // (once per process)
  auto& dispatcher = c10::Dispatcher::singleton();
  long count = 0;
  for (const auto& name : dispatcher.getAllOpNames()) count += register_op(name);
  if (!dispatcher.findOp(c10::OperatorName("aten::add", "Tensor"))
           ->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
    PyErr_SetString(PyExc_RuntimeError, "lazymlir native entry: registration failed");
    return nullptr;
  }
  libraries.push_back(std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__));
  libraries.back()->fallback(torch::CppFunction::makeFromBoxedFunction<&entry>());
  // Sparse layouts on the device (`sparse.to("lazy_mlir")` makes a COO tensor of lazy
  // indices and values): the Python tracer refuses them by name, as it refuses
  // other layouts, instead of the dispatcher's "Could not run ... 'Sparselazy_mlir'".
  libraries.push_back(std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::SparsePrivateUse1, __FILE__, __LINE__));
  libraries.back()->fallback(torch::CppFunction::makeFromBoxedFunction<&entry>());
  // (adding a listener calls it for every op there is: those are done)
  listening.emplace(dispatcher.addRegistrationListener(std::make_unique<NewOps>()));
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    pending.clear();
    has_pending = false;
  }
  return PyLong_FromLong(count);
  END_HANDLE_TH_ERRORS
}

// make(value) -> a new inner tensor (class LazyTensor) holding `value`.
PyObject* make(PyObject*, PyObject* value) {
  HANDLE_TH_ERRORS
  PyObject* meta = PyObject_GetAttrString(value, "meta");
  if (meta == nullptr) return nullptr;
  if (!THPVariable_Check(meta)) {
    Py_DECREF(meta);
    PyErr_SetString(PyExc_TypeError, "LazyValue.meta must be a tensor");
    return nullptr;
  }
  at::Tensor m = THPVariable_Unpack(meta);
  Py_DECREF(meta);
  Py_INCREF(value);
  at::Tensor tensor = make_tensor(m.sizes(), m.dtype(), value);
  return wrap(tensor);
  END_HANDLE_TH_ERRORS
}

LazyImpl* impl_of(PyObject* object) {
  if (!THPVariable_Check(object)) return nullptr;
  return lazy_impl(THPVariable_Unpack(object));
}

// value_of(tensor) -> its LazyValue, or None for a tensor that is not an inner lazy one.
PyObject* value_of(PyObject*, PyObject* object) {
  LazyImpl* impl = impl_of(object);
  if (impl == nullptr || impl->value == nullptr) Py_RETURN_NONE;
  Py_INCREF(impl->value);
  return impl->value;
}

PyObject* set_value(PyObject*, PyObject* args) {
  PyObject *object, *value;
  if (!PyArg_ParseTuple(args, "OO", &object, &value)) return nullptr;
  LazyImpl* impl = impl_of(object);
  if (impl == nullptr) {
    PyErr_SetString(PyExc_TypeError, "set_value: not an inner lazy_mlir tensor");
    return nullptr;
  }
  Py_INCREF(value);
  Py_XDECREF(impl->value);
  impl->value = value;
  Py_RETURN_NONE;
}

// as_lazy(tensor) -> the tensor, of class LazyTensor if it is an inner lazy tensor.
PyObject* as_lazy(PyObject*, PyObject* object) {
  HANDLE_TH_ERRORS
  LazyImpl* impl = impl_of(object);
  if (impl == nullptr) {
    Py_INCREF(object);
    return object;
  }
  return wrap(THPVariable_Unpack(object));
  END_HANDLE_TH_ERRORS
}

// untrack(object): Python's garbage collector no longer tracks it (Node, LazyValue);
// track(object): it does again.
PyObject* untrack(PyObject*, PyObject* object) {
  if (PyObject_IS_GC(object)) PyObject_GC_UnTrack(object);
  Py_RETURN_NONE;
}

PyObject* track(PyObject*, PyObject* object) {
  if (PyObject_IS_GC(object) && !PyObject_GC_IsTracked(object)) PyObject_GC_Track(object);
  Py_RETURN_NONE;
}

PyObject* is_lazy(PyObject*, PyObject* object) {
  return PyBool_FromLong(impl_of(object) != nullptr);
}

bool owned_by_current() {
  return PyDict_GetItem(R.session_globals, R.current_name) == live_owner;
}

// live_pending() -> the LazyValues of live inner tensors that are pending (each once).
PyObject* live_pending(PyObject*, PyObject*) {
  PyObject* out = PyList_New(0);
  if (out == nullptr || !owned_by_current()) return out;
  std::unordered_set<PyObject*> seen;
  for (auto& strong : live_members()) {
    auto* impl = static_cast<LazyImpl*>(strong.get());
    PyObject* value = impl->value;
    if (value != nullptr && get_slot(value, R.v_node) != Py_None && seen.insert(value).second) {
      if (PyList_Append(out, value) < 0) {
        Py_DECREF(out);
        return nullptr;
      }
    }
  }
  return out;
}

// live_tensors() -> the live inner tensors, in creation order.
PyObject* live_tensors(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  PyObject* out = PyList_New(0);
  if (out == nullptr || !owned_by_current()) return out;
  for (auto& strong : live_members()) {
    PyObject* t = wrap(at::Tensor(std::move(strong)));
    if (t == nullptr || PyList_Append(out, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(t);
  }
  return out;
  END_HANDLE_TH_ERRORS
}

// take_trace_time() -> seconds the fast path spent on top-level ops since the last call.
PyObject* take_trace_time(PyObject*, PyObject*) {
  double s = fast_seconds;
  fast_seconds = 0.0;
  return PyFloat_FromDouble(s);
}

// set_fast_path(on) -> whether it was on. Off, every call goes to the Python tracer.
PyObject* set_fast_path(PyObject*, PyObject* on) {
  bool was = fast_path;
  fast_path = PyObject_IsTrue(on);
  return PyBool_FromLong(was);
}

PyMethodDef methods[] = {
    {"set_fast_path", set_fast_path, METH_O, nullptr},
    {"configure", configure, METH_VARARGS, nullptr},
    {"configure_foreach", configure_foreach, METH_O, nullptr},
    {"install_foreach_meta", install_foreach_meta, METH_O, nullptr},
    {"uninstall_foreach_meta", uninstall_foreach_meta, METH_NOARGS, nullptr},
    {"foreach_meta_stats", foreach_meta_stats, METH_NOARGS, nullptr},
    {"register_kernels", register_kernels, METH_NOARGS, nullptr},
    {"make", make, METH_O, nullptr},
    {"value_of", value_of, METH_O, nullptr},
    {"set_value", set_value, METH_VARARGS, nullptr},
    {"as_lazy", as_lazy, METH_O, nullptr},
    {"is_lazy", is_lazy, METH_O, nullptr},
    {"untrack", untrack, METH_O, nullptr},
    {"track", track, METH_O, nullptr},
    {"live_pending", live_pending, METH_NOARGS, nullptr},
    {"live_tensors", live_tensors, METH_NOARGS, nullptr},
    {"take_trace_time", take_trace_time, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "lazymlir_native_entry", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_lazymlir_native_entry() { return PyModule_Create(&module_def); }

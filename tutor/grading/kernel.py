"""The grader's code that runs inside the grading kernel, beside the learner's code.

The grader does not import this module in the kernel: ``tutor.grading.plan`` sends its source text, and
the grader's cells execute it into a module object of their own, then call its functions with the nonce
and paths as literals. The kernel's namespace holds only names that start with ``__tutor_grade``, so
learner code does not clash with them. In the order the cells run:

1. the preamble, before any learner code: :func:`cap_memory`, :func:`snapshot` (which returns
   ``restore``) and :func:`make_capture` (which returns ``capture``);
2. after each learner cell that defines an exercise: ``capture(names, globals())``, which keeps the
   learner's definitions as that cell left them;
3. a cell of its own: :func:`reset_hooks` forgets the learner's IPython hooks (before the next cell);
4. the load cell, built afresh from this text after the learner's code ran: :func:`load` calls
   ``restore`` (undoing the learner's patches of torch and builtins), throws away every ``tutor``
   module, imports a pristine copy of the package and returns ``grade``;
5. one check cell per exercise, the only place its nonce exists: ``grade(nonce, name, learner_name)``
   sends the result as a display message of the type :data:`MIME`.

Only the standard library is imported at module level: this runs in the learner's kernel before the
pristine copy of ``tutor`` exists. torch and IPython are imported inside the functions that need them.
"""

from __future__ import annotations

import builtins
import importlib
import os
import sys

MIME = "application/vnd.tutor.grade+json"

# Attributes of builtins that ipykernel sets for every cell: not the learner's doing.
KERNEL_BUILTINS = ("input", "raw_input", "getpass", "_", "__", "___")


def cap_memory(limit: int) -> None:
    """Cap this process's address space (``RLIMIT_AS``) at ``limit`` bytes; 0 means no cap."""
    try:
        import resource  # imported here: Unix only; without it the kernel runs uncapped

        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except Exception as error:  # noqa: BLE001 - no cap (not Unix, limit refused): grade uncapped, say so
        print("tutor grade: no memory cap:", error)


def snapshot():
    """Remember the attributes of ``torch``, ``torch.Tensor``, ``torch.nn.functional``, ``torch.nn.Module``
    and ``builtins``, and the import hooks. Returns ``restore()``, which puts them back and returns the
    names of what had changed (``["torch.allclose", ...]``)."""
    import torch  # imported here: this module imports only the standard library
    import torch.nn
    import torch.nn.functional

    targets = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional,
               "torch.nn.Module": torch.nn.Module, "builtins": builtins}
    if hasattr(torch._C, "TensorBase"):
        targets["torch._C.TensorBase"] = torch._C.TensorBase
    saved = {name: (obj, dict(vars(obj))) for name, obj in targets.items()}
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)

    def restore():
        changed = []
        for name, (obj, attrs) in saved.items():
            for key, value in attrs.items():
                if name == "builtins" and key in KERNEL_BUILTINS:
                    continue
                try:
                    now = vars(obj).get(key, None)
                    if now is not value:
                        setattr(obj, key, value)
                        changed.append(f"{name}.{key}")
                except Exception:  # noqa: BLE001 - restore what can be restored; learner code may break any
                    pass
            for key in [k for k in list(vars(obj)) if k not in attrs]:
                if type(vars(obj)[key]).__name__ == "module" or (name == "builtins" and key in ("_", "__", "___")):
                    continue  # a submodule imported since (torch.fx ...)
                try:
                    delattr(obj, key)
                    changed.append(f"{name}.{key}")
                except Exception:  # noqa: BLE001 - restore what can be restored; learner code may break any
                    pass
        sys.meta_path[:], sys.path_hooks[:] = meta_path, path_hooks
        return changed

    return restore


def make_capture():
    """Returns ``capture``: ``capture(names, namespace)`` keeps those names' current values; ``capture()``
    returns everything kept so far."""
    captured = {}

    def capture(names=None, namespace=None):
        """Keep the learner's definitions as their exercise cell left them (later cells may rebind the names)."""
        if names is None:
            return dict(captured)
        for name in names:
            if name in namespace:
                captured[name] = namespace[name]

    return capture


def reset_hooks() -> None:
    """Forget the learner's IPython hooks: event callbacks, input transformers and AST transformers."""
    import IPython  # imported here: this module imports only the standard library

    ip = IPython.get_ipython()
    for event in list(ip.events.callbacks):
        ip.events.callbacks[event] = []
    ip.input_transformers_post[:] = []
    ip.ast_transformers[:] = []


def load(nonce: str, package: str, restore, captured: dict, environ: dict):
    """Restore torch and builtins, import a pristine ``tutor`` from ``package`` and return ``grade``.

    Sends one message tagged with ``nonce``: ``{"load": True, "changed": [...], "foreign": [...]}``,
    where ``changed`` is what ``restore`` put back and ``foreign`` the ``tutor`` modules that did not come
    from ``package``. ``captured`` holds the learner's definitions (see :func:`make_capture`).
    """
    from IPython.display import publish_display_data  # imported here: this module imports only the standard library

    changed = restore()
    os.environ.update(environ)
    for name in [m for m in list(sys.modules) if m == "tutor" or m.startswith("tutor.")]:
        del sys.modules[name]
    sys.path.insert(0, package)
    importlib.invalidate_caches()
    import tutor.checks  # the pristine copy, written to `package` only now

    for notebook in tutor.checks.catalog.NOTEBOOKS:  # every check now, before any of them runs learner code
        tutor.checks.check_module(notebook.number)
    pristine = os.path.realpath(package)
    foreign = sorted(name for name, module in list(sys.modules.items())
                     if (name == "tutor" or name.startswith("tutor."))
                     and not os.path.realpath(getattr(module, "__file__", "") or "").startswith(pristine))
    checks = tutor.checks

    def emit(payload, _publish=publish_display_data, _mime=MIME):
        _publish({_mime: payload})

    def grade(nonce, name, learner_name):
        """Check the learner's ``learner_name`` with ``checks.<name>``; send the result tagged with ``nonce``."""
        if learner_name not in captured:
            emit({"nonce": nonce, "exercise": name, "status": "missing",
                  "summary": f"`{learner_name}` is not defined", "details": []})
            return
        obj = captured[learner_name]
        if str(getattr(obj, "__module__", "") or "").split(".")[0] == "tutor":
            emit({"nonce": nonce, "exercise": name, "status": "failed",
                  "summary": f"`{learner_name}` is the course's model answer ({obj.__module__}), not your code",
                  "details": []})
            return
        result = getattr(checks, name)(obj)
        if type(result) is not checks.CheckResult:
            emit({"nonce": nonce, "exercise": name, "status": "error", "summary": "the check was tampered with",
                  "details": []})
            return
        emit({"nonce": nonce, "exercise": name, "status": str(result.status), "summary": str(result.summary),
              "details": [str(d) for d in result.details]})

    emit({"nonce": nonce, "load": True, "changed": changed, "foreign": foreign})
    return grade

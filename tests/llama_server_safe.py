"""``python -m llama_cpp.server`` with llama.cpp's CPU weight repacking off: the safe
configuration on every CPU (engine/llama/repack.py). The server has no switch for it (its
``Llama`` takes no ``use_extra_bufts``), so this sets it on the model parameters every
``Llama`` starts from, then runs the server with the arguments given.

On an Intel CPU with AMX, this llama.cpp build's AMX kernel kills the process on the
first multi-token batch; the tests' server must not depend on the CPU it runs on."""

from __future__ import annotations

import runpy

import llama_cpp.llama_cpp as llama_cpp_c

_default_params = llama_cpp_c.llama_model_default_params


def _safe_params():
    params = _default_params()
    params.use_extra_bufts = False
    return params


if __name__ == "__main__":
    llama_cpp_c.llama_model_default_params = _safe_params
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)

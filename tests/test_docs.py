"""The README and docs/ against the code: the module map is generated from it, the README's Python example runs,
the README stays a five-minute read whose links resolve, and docs/gpus.md's launch lines name files and presets
that exist and its cost table marks every figure measured or estimate."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _module_map():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_map_is_generated_from_the_code():
    mm = _module_map()
    text = mm.DOC.read_text()
    block = text.split(mm.START, 1)[1].split(mm.END, 1)[0].strip("\n") + "\n"
    assert block == mm.module_map(), "docs/modules.md is stale: run `python scripts/module_map.py --write`"


def test_first_sentence_keeps_abbreviations():
    mm = _module_map()
    assert mm.first_sentence("ES (Qiu et al. 2025's ES). More.") == "ES (Qiu et al. 2025's ES)."
    assert mm.first_sentence("One line\nwrapped. Second.\n\nNext paragraph.") == "One line wrapped."
    assert mm.first_sentence(None) == ""


def test_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 105  # a five-minute read; the rest lives in docs/ (docs/usage.md)
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and all((ROOT / link).exists() for link in links), [
        link for link in links if not (ROOT / link).exists()]
    assert text.index("](figures/summary.png)") < text.index("<!-- claims:start -->")  # the summary figure heads it
    assert "](docs/usage.md)" in text and "](papers/claims.md)" in text


def test_gpu_docs_launch_lines_name_files_and_presets_that_exist_and_mark_every_cost_figure():
    from esreason_lib.paper.studies.presets import get_preset

    text = (ROOT / "docs" / "gpus.md").read_text()
    code = "\n".join(re.findall(r"```bash\n(.*?)```", text, flags=re.S))
    paths = set(re.findall(r"\b(?:scripts|configs|benchmarks)/[\w./-]+\.(?:py|sh|yaml)\b", text))
    assert paths and all((ROOT / p).is_file() for p in paths), sorted(p for p in paths if not (ROOT / p).is_file())
    for preset in set(re.findall(r"--preset ([\w-]+)", code)):
        get_preset(preset)
    block = re.search(r"```bash\n(.*?)```", text[text.index("**Launch lines**"):], flags=re.S).group(1)
    launches = [line for line in block.splitlines() if not line.startswith(("#", "ray start", " "))]
    for command in ("esreason train es", "torchrun", "accelerate launch"):  # one node and several, ES and GRPO
        lines = [line for line in launches if line.startswith(command)]
        assert any("--ray-address" in line or "--nnodes" in line or "--num_machines" in line for line in lines), command
        assert any(not ("--ray-address" in line or "--nnodes" in line or "--num_machines" in line) for line in lines)
    table = text[text.index("| method, backend | GPUs | wall time | status |"):].split("\n\n")[0].splitlines()[2:]
    assert table and {row.split("|")[4].strip() for row in table} <= {"estimate", "measured"}
    assert "Paper scale in five steps" in text and "GPU-hours (estimate)" in text


def test_readme_names_the_task_the_base_and_its_measured_size():
    """The README names the task, the default base and its parameter count as the shipped model's config gives it
    (counted on the meta device, not estimated), and the larger size beside it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from esreason_lib.models.zoo import num_parameters
    from esreason_lib.paper.studies.presets import get_preset

    text = README.read_text()
    base = get_preset("tiny").base_model
    assert "Countdown" in text and f"`{base}`" in text and "habit" in text
    for name in (base, "qwen2-m"):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ROOT / "zoo" / name))
        assert f"{num_parameters(model):,} parameters" in text, name


def _random_causal_lm(architecture: str, tokenizer):
    """A randomly initialised causal LM of `architecture` for `tokenizer`: the zoo's tiny Qwen2, or a GPT-2 of the
    same scale."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from esreason_lib.models.zoo import tiny_random_qwen2

    if architecture == "qwen2":
        return tiny_random_qwen2(len(tokenizer), seed=0)
    eos = tokenizer.eos_token_id
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=32, n_layer=2, n_head=2,
                                      bos_token_id=eos, eos_token_id=eos))


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["qwen2", "gpt2"])
def test_readme_example_trains_es_on_a_model_directory_with_a_custom_verifier(architecture, tmp_path):
    """The README's block run as written on any causal LM directory (a GPT-2: "auto" falls back to the sequential
    backend and says so), printing the run and its before/after table; the repository's code is imported."""
    from esreason_lib.models.zoo import build_char_tokenizer

    block = README.read_text().split("## ES on your own model and verifier", 1)[1]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    model_dir = tmp_path / "my-model"
    tokenizer = build_char_tokenizer()
    _random_causal_lm(architecture, tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    assert 'model_dir = "path/to/your/hf-model"' in code
    script = tmp_path / "example.py"
    script.write_text(code.replace("path/to/your/hf-model", str(model_dir)))
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                              "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-2000:]
    runs = list((tmp_path / "runs").glob("es-*"))
    assert len(runs) == 1
    manifest = json.loads((runs[0] / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert len((runs[0] / "metrics.jsonl").read_text().splitlines()) == 4
    out = res.stdout.splitlines()
    assert out[0] == str(runs[0].resolve()) or out[0].endswith(runs[0].name), out
    assert out[1].split() == ["model", "greedy", "pass@1", "pass@8"], out
    assert [line.split()[0] for line in out[2:]] == ["before", "after"], out
    fallback = [line for line in res.stderr.splitlines() if "sequential backend" in line]
    assert len(fallback) == (architecture == "gpt2"), res.stderr[-2000:]

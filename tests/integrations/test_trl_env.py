"""The TRL environment class, through TRL's own code: ``GRPOTrainer(environment_factory=...)`` turns it into
tools (transformers' ``get_json_schema`` on each method, the chat template rendering them), and a GRPO step
on the CPU calls them.

The model and tokenizer are made here, nothing is downloaded: a byte-level BPE trained on the tools' own
schemas, with TRL's Qwen3 chat template, and a one-layer Qwen3 whose attention and MLP outputs are zero and
whose embeddings and head are set so that it always answers with one tool call (a random model would almost
never produce a parsable call, so TRL's tool loop would not run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from integration_helpers import ROOT, run_example

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from transformers.utils import get_json_schema
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen3_chat_template

from mlsandbox.gateway import action_catalog
from mlsandbox.integrations.trl import MLSandboxToolEnv, action_tools, tool_env_class

pytestmark = pytest.mark.integrations

SCENARIO = "churn-clean-small"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
TOOL_TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def tiny_tokenizer(env_cls: type) -> Any:
    """A byte-level BPE (lossless on any text) trained on the tools' schemas and the chat template."""
    corpus = [json.dumps(get_json_schema(t)) for t in action_tools(env_cls()).values()]
    corpus += [qwen3_chat_template, "[step 1] check_data_quality: ok budget: credits used result: profile"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 2, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL,
    )
    tokenizer.add_tokens(TOOL_TAGS)  # plain added tokens, as in Qwen's tokenizer (kept when decoding)
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def scripted_model(tokenizer: Any, call: dict[str, Any]) -> Qwen3ForCausalLM:
    """A one-layer Qwen3 that answers anything with ``<tool_call>CALL</tool_call><|im_end|>``.

    Attention and MLP write nothing (zero output projections), so the logits depend on the current token
    alone: every token embeds as e0 except the three of the call, which embed as e1, e2, e3; the head maps
    e0 -> <tool_call>, e1 -> the call, e2 -> </tool_call>, e3 -> <|im_end|>."""
    tokenizer.add_tokens([json.dumps(call)])
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", json.dumps(call), "</tool_call>")]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=16384,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos, bos_token_id=None, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        emb.zero_()
        emb[:, 0] = 1.0
        head.zero_()
        for k, t in enumerate(ids, 1):
            emb[t] = 0.0
            emb[t, k] = 1.0
        for k, nxt in enumerate([*ids, eos]):
            head[nxt, k] = 12.0
    return model


def grpo_config(tmp_path: Path, **kw: Any) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=2, num_generations=2, max_steps=1,
        use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no",
        dataloader_num_workers=0, **kw,
    )  # fmt: skip


def test_trl_turns_every_action_into_a_documented_tool(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer(MLSandboxToolEnv)
    model = scripted_model(tokenizer, {"name": "list_datasets", "arguments": {}})
    trainer = GRPOTrainer(
        model=model,
        args=grpo_config(tmp_path, max_completion_length=64),
        processing_class=tokenizer,
        environment_factory=MLSandboxToolEnv,  # the zero-argument class itself
    )
    catalog = action_catalog()
    assert sorted(t.__name__ for t in trainer.tools) == sorted(a["type"] for a in catalog)
    assert trainer.reward_func_names == ["MLSandboxToolEnv"]  # get_reward: the environment owns the reward
    schemas = {s["function"]["name"]: s["function"] for s in map(get_json_schema, trainer.tools)}
    for action in catalog:
        fn = schemas[action["type"]]
        assert fn["description"] and fn["description"].split()[0] in action["description"]
        required = set(action["parameters"].get("required", [])) - {"type"}
        assert set(fn["parameters"].get("required", [])) == required, action["type"]
        assert set(fn["parameters"]["properties"]) == set(action["parameters"]["properties"]) - {"type"}
        for p in fn["parameters"]["properties"].values():
            assert p["description"], (action["type"], p)
    from typing import get_args

    from mlsandbox.gateway.packs.core.actions import CleanDataset

    strategies = list(get_args(CleanDataset.model_fields["strategy"].annotation))
    assert "drop_na" in strategies and "fill_gaps" in strategies  # the tables' and the other kinds'
    assert schemas["clean_dataset"]["parameters"]["properties"]["strategy"]["enum"] == strategies
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "go"}], tools=trainer.tools, tokenize=False, add_generation_prompt=True
    )
    assert all(f'"name": "{a["type"]}"' in prompt for a in catalog)

    limited = tool_env_class(actions=["list_datasets", "submit"])
    assert sorted(action_tools(limited())) == ["list_datasets", "submit"]
    with pytest.raises(ValueError, match=r"unknown actions \['fly'\]"):
        tool_env_class(actions=["fly"])


def test_plug_in_pack_actions_become_tools(tmp_path: Path) -> None:
    target = tmp_path / "plugins"
    uv = Path(os.environ.get("MLSANDBOX_HOME", Path.home() / ".cache" / "mlsandbox")) / "tools" / "bin" / "uv"
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(ROOT / "examples" / "mlsandbox-plugin-example")],
        check=True, env={**os.environ, "VIRTUAL_ENV": sys.prefix}, timeout=600,
    )  # fmt: skip
    code = (
        "import json; from transformers.utils import get_json_schema\n"
        "from mlsandbox.integrations.trl import MLSandboxToolEnv, action_tools\n"
        "tools = action_tools(MLSandboxToolEnv())\n"
        "print(json.dumps(get_json_schema(tools['dataset_lineage'])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    fn = json.loads(done.stdout.strip().splitlines()[-1])["function"]
    assert fn["name"] == "dataset_lineage" and fn["parameters"]["required"] == ["dataset"]


@pytest.mark.services
def test_tools_play_an_episode_and_the_grade_is_the_reward(sandbox: Any) -> None:
    Env = tool_env_class(scenario=SCENARIO, sandbox=sandbox.name)
    env = Env()
    task = env.reset(prompt=[{"role": "user", "content": "x"}], seed=7, difficulty="ignored")
    assert "[step 0]" in task and "churn" in task and "raw/customers.parquet" in task
    assert "[step 1] check_data_quality: ok" in env.check_data_quality(dataset="raw/customers.parquet")
    missing = env.check_data_quality(dataset="raw/none.csv")
    assert "[step 2] check_data_quality: ERROR not_found" in missing and "not_found" in missing
    bad = env.clean_dataset(dataset="raw/customers.parquet", strategy="scrub")
    assert "invalid_parameters" in bad and "strategy" in bad
    with pytest.raises(TypeError):
        env.list_datasets(colour="red")  # TRL reports this to the model as a failed tool call
    assert "job-1" in env.train_model(dataset="raw/customers.parquet", algorithm="logistic_regression")
    for _ in range(10):
        env.wait(seconds=30)
        if "succeeded" in env.get_job(job_id="job-1"):
            break
    run_id = env.env.gateway.state.jobs["job-1"].run_id
    assert run_id, env.get_job(job_id="job-1")
    assert "version" in env.register_model(run_id=run_id, name="churn")
    reward = env.get_reward()  # the model did not submit: submitted now, then graded
    assert env.done and env.grade is not None and env.grade["success"]
    assert reward == pytest.approx(env.grade["score"]) and reward > 0
    assert "episode_over" in env.list_datasets()

    text = env.reset(seed=8)  # the same instance, a new episode (TRL reuses instances across batches)
    assert "[step 0]" in text and not env.done
    ret = tool_env_class(scenario=SCENARIO, sandbox=sandbox.name, reward_kind="return")()
    ret.reset(seed=8)
    ret.list_datasets()
    assert ret.get_reward() == pytest.approx(-0.04)  # two steps' cost, no task reward
    env._close()
    ret._close()


@pytest.mark.slow
@pytest.mark.services
def test_a_grpo_step_on_the_cpu_calls_the_tools(sandbox: Any, tmp_path: Path) -> None:
    Env = tool_env_class(
        scenario=SCENARIO,
        sandbox=sandbox.name,
        actions=["list_datasets", "check_data_quality", "submit"],
        max_observation_chars=300,
    )
    call = {"name": "check_data_quality", "arguments": {"dataset": "raw/customers.csv"}}
    tokenizer = tiny_tokenizer(Env)
    model = scripted_model(tokenizer, call)
    data = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": "Solve the task."}]] * 2, "seed": [3, 3]}
    )
    trainer = GRPOTrainer(
        model=model,
        args=grpo_config(tmp_path, max_completion_length=2048, max_tool_calling_iterations=2),
        train_dataset=data,
        processing_class=tokenizer,
        environment_factory=Env,
    )
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["tools/call_frequency"] > 0 and logs["tools/failure_frequency"] == 0
    envs = trainer.environments
    assert len(envs) == 2 and all(e.done and e.grade is not None for e in envs)
    for e in envs:  # each rollout: its tool calls were valid steps of its own episode, then submit
        state = e.env.gateway.state
        assert state.step >= 2 and state.submitted and state.invalid_actions == 0
    assert trainer.state.global_step == 1
    assert logs["rewards/MLSandboxToolEnv/mean"] == pytest.approx(0.0)  # nothing registered: score 0
    for e in envs:
        e._close()


@pytest.mark.services
def test_readme_example(sandbox: Any) -> None:
    done = run_example("trl", {"MLSANDBOX_NAME": sandbox.name})
    assert "check_data_quality" in done.stdout

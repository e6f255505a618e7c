"""The patching of diffusers' modules (integrations/diffusers_hook.py): every served function or forward is
patched on its own, whatever the other loaded diffusers modules do when asked for an attribute, and a patch
that fails says why instead of leaving diffusers half patched in silence."""
import pytest

from tests.harness.isolated import run_isolated
from torch_tpu.integrations import diffusers_hook


def test_patch_each_patches_the_others_when_one_raises():
    done = []

    def patch_one(name):
        if name == "b":
            raise ValueError("no b here")
        done.append(name)

    with pytest.raises(RuntimeError, match="b: ValueError: no b here"):
        diffusers_hook.patch_each(["a", "b", "c"], patch_one)
    assert done == ["a", "c"]


def test_patched_past_lazy_modules_that_raise_or_import_on_attribute_access():
    """diffusers' lazy modules import when an attribute is asked for, and raise RuntimeError when that import
    fails. Loaded beside the model modules (one that imported ``apply_rotary_emb`` by name, one lazy module
    that raises, one that imports a module into ``sys.modules`` while asked), they are not asked at all:
    every function is patched, the module that holds the name gets the wrapper, nothing failed. FLUX's
    transformer module, imported before torch_tpu too, computes a double block's attention on tpu with
    diffusers' values."""
    out = run_isolated("""
        import sys, types
        from diffusers.models import embeddings, normalization
        from diffusers.models.transformers import transformer_flux as tf

        asked = []

        class Lazy(types.ModuleType):
            def __init__(self, name, action):
                super().__init__(name)
                self._action = action

            def __getattr__(self, name):
                asked.append((self.__name__, name))
                if self._action == "raise":
                    raise RuntimeError("Failed to import diffusers.pipelines.something")
                import json.tool  # a new entry in sys.modules while the patch looks at them
                raise AttributeError(name)

        sys.modules["diffusers.zz_raises"] = Lazy("diffusers.zz_raises", "raise")
        sys.modules["diffusers.zz_imports"] = Lazy("diffusers.zz_imports", "import")
        holder = types.ModuleType("diffusers.zz_holder")
        holder.apply_rotary_emb = embeddings.apply_rotary_emb
        sys.modules["diffusers.zz_holder"] = holder

        import torch
        import torch_tpu
        from torch_tpu.integrations import diffusers_embeddings, diffusers_hook

        assert diffusers_embeddings.installed(), diffusers_hook.failure(diffusers_embeddings.TARGET)
        torch.manual_seed(0)
        m = tf.FluxAttention(query_dim=32, heads=2, dim_head=16, added_kv_proj_dim=32, context_pre_only=False,
                             bias=True, eps=1e-6).eval()
        x, c = torch.randn(1, 6, 32), torch.randn(1, 3, 32)
        with torch.no_grad():
            want = m(x, encoder_hidden_states=c)
            mt = m.to("tpu")
            xt, ct = x.to("tpu"), c.to("tpu")
            got = mt(xt, encoder_hidden_states=ct)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, atol=2e-5, rtol=2e-5)
        assert diffusers_hook.failure(diffusers_embeddings.TARGET) is None
        assert holder.apply_rotary_emb is embeddings.apply_rotary_emb
        assert hasattr(holder.apply_rotary_emb, "__torch_tpu_original__")
        assert asked == [], asked
        print("patched")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, prelude=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "patched" in out.stdout


def test_a_failed_patch_is_reported_and_the_rest_is_patched():
    """A served function that cannot be wrapped (here its signature cannot be read) stays diffusers' own,
    the other two are wrapped, and ``failure`` names the function and the error."""
    out = run_isolated("""
        import inspect
        from diffusers.models import embeddings

        original = embeddings.get_1d_rotary_pos_embed

        class Unreadable:
            __name__ = "get_1d_rotary_pos_embed"

            def __call__(self, *args, **kwargs):
                return original(*args, **kwargs)

            @property
            def __signature__(self):
                raise ValueError("signature not readable")

        embeddings.get_1d_rotary_pos_embed = Unreadable()

        import torch
        import torch_tpu
        from torch_tpu.integrations import diffusers_embeddings, diffusers_hook

        assert not diffusers_embeddings.installed()
        assert hasattr(embeddings.apply_rotary_emb, "__torch_tpu_original__")
        assert hasattr(embeddings.get_timestep_embedding, "__torch_tpu_original__")
        failure = diffusers_hook.failure(diffusers_embeddings.TARGET)
        assert "get_1d_rotary_pos_embed: ValueError: signature not readable" in failure, failure
        print("reported")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, prelude=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "reported" in out.stdout

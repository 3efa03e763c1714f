"""Artifacts for the GPU check of this session's changes: unbounded RoBERTa
and GPT-2 (index checks), a Llama-4-shaped model (complex rotary as pairs),
built for cuda sm_90; inputs and eager outputs (float32 and float64)."""
import sys, time, torch, anyshape
sys.path.insert(0, "bench"); sys.path.insert(0, "test/python")
from models import small_roberta, roberta_inputs, small_gpt2_last_token
from torch.export import Dim
import family_sweep as fs

out = sys.argv[1]
kw = dict(target="cuda", cache=False, backend=anyshape.BackendOptions(cuda_arch="sm_90"))
data = {}
def dims(n):
    b, s = Dim("batch"), Dim("seq")
    return tuple({0: b, 1: s} for _ in range(n))

torch.manual_seed(0)
rob = small_roberta(max_positions=130).eval()
ids, mask = roberta_inputs(2, 8)
anyshape.compile(rob, (ids, mask), dynamic_shapes=dims(2), **kw).save(f"{out}/roberta")
cases = []
for b, L, pad in [(1, 7, None), (3, 33, 17), (2, 128, 64)]:
    i, m = roberta_inputs(b, L, pad_from=pad, seed=L)
    with torch.no_grad():
        cases.append((i, m, rob(i, attention_mask=m).logits, rob.double()(i, attention_mask=m).logits.float()))
    rob.float()
data["roberta"] = {"cases": cases, "bad": roberta_inputs(1, 129)}

torch.manual_seed(0)
gpt = small_gpt2_last_token().eval()
ids = torch.randint(0, 500, (2, 6))
anyshape.compile(gpt, (ids, torch.ones_like(ids)), dynamic_shapes=dims(2), **kw).save(f"{out}/gpt2")
cases = []
for b, L in [(1, 1), (3, 17), (2, 64)]:
    i = torch.randint(0, 500, (b, L)); m = torch.ones_like(i)
    with torch.no_grad():
        cases.append((i, m, gpt(i, m), gpt.double()(i, m).float()))
    gpt.float()
bad_ids = torch.randint(0, 500, (2, 7)); bad_ids[1, 3] = 500
data["gpt2"] = {"cases": cases, "bad_ids": bad_ids, "long": torch.randint(0, 500, (1, 65))}

fam = fs.Family("llama4_text", "causal", "causal-lm")
args = tuple(fam.example())
anyshape.compile(fam.wrapper, args, dynamic_shapes=dims(len(args)), **kw).save(f"{out}/llama4_text")
cases = []
for b, L in [(1, 7), (2, 33)]:
    i, m = fam.inputs(b, L, seed=L)[:2]
    with torch.no_grad():
        want = fam.wrapper(i, m)
        want64 = fam.wrapper.double()(i, m).float()
    fam.wrapper.float()
    cases.append((i, m, want, want64))
data["llama4_text"] = {"cases": cases}
torch.save(data, f"{out}/data.pt")
print("built", flush=True)

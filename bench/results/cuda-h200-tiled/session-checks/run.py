"""On the GPU machine: this session's changes on CUDA (see /tmp/idx/build2.py)."""
import sys, traceback, torch, anyshape
root = sys.argv[1]
data = torch.load(f"{root}/data.pt")
print(torch.cuda.get_device_name(0), anyshape.__file__, flush=True)
def err(got, want):
    return (got.float().cpu() - want).abs().max().item()
for name in ("roberta", "gpt2", "llama4_text"):
    try:
        m = anyshape.load(f"{root}/{name}", device="cuda")
        for i, mk, want, want64 in data[name]["cases"]:
            got = m(i.cuda(), mk.cuda())
            got = got.logits if hasattr(got, "logits") else got
            print(name, tuple(i.shape), "device", got.device, f"err vs eager32 {err(got, want):.2e} vs eager64 {err(got, want64):.2e}", flush=True)
    except Exception:
        print(name, "FAILED", traceback.format_exc()[-1500:], flush=True)
        continue
    def bad(label, *a):
        try:
            got = m(*[x.cuda() for x in a])
            got = got.logits if hasattr(got, "logits") else got
            print(name, label, "no error; finite:", bool(torch.isfinite(got).all()), flush=True)
        except Exception as e:
            print(name, label, type(e).__name__, str(e)[:300].replace("\n", " "), flush=True)
    if name == "roberta":
        bad("129 tokens", *data[name]["bad"])
    if name == "gpt2":
        bad("token id 500", data[name]["bad_ids"], torch.ones_like(data[name]["bad_ids"]))
        bad("65 tokens", data[name]["long"], torch.ones_like(data[name]["long"]))
print("done", flush=True)

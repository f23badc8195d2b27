"""Put vm_point.py's output back together: collect.py VM_RUN_STDOUT OUT.json"""
import base64
import json
import sys
import zlib

lines = open(sys.argv[1]).read().splitlines()
if "@@end" not in lines:
    sys.exit(f"{sys.argv[1]}: no @@end line: the guest's run did not finish")
blob = "".join(ln[5:] for ln in lines if ln.startswith("@@vm "))
doc = json.loads(zlib.decompress(base64.b64decode(blob)))
with open(sys.argv[2], "w") as f:
    json.dump(doc, f)
print(f"{sys.argv[2]}: {doc['nodes']} nodes, one worker {doc['one_worker_s']:.2f} s, local {doc['local']['wall_s']:.2f} s, "
      f"remote {doc['remote']['wall_s']:.2f} s")

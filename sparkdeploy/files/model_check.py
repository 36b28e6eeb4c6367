#!/usr/bin/env python3
"""
Check model folders on a Spark: are the files an engine needs there and non-empty, and was
the folder completed by the deploy (its marker names the repository and revision)?

    python3 model_check.py FOLDER WANT TOKENIZER [FOLDER WANT TOKENIZER ...]   # one JSON line each
    python3 model_check.py --seal FOLDER WANT TOKENIZER     # verify, then write the marker
    python3 model_check.py --verify FOLDER WANT TOKENIZER   # exit 1 naming what is missing

WANT is "repo@revision"; TOKENIZER is 1 when the engine needs tokenizer.json there (the
model) and 0 when not (a draft head). Runs on the Spark's own python3, standard library only.
"""

import json
import os
import sys

MARKER = ".spark-deploy-complete"


def check(folder, want, needs_tokenizer):
    result = {
        "folder": folder,
        "exists": os.path.isdir(folder),
        "marker": "",
        "missing": [],
        "empty": [],
    }
    if not result["exists"]:
        return result
    try:
        with open(os.path.join(folder, MARKER)) as f:
            result["marker"] = f.read().strip()
    except OSError:
        pass
    needed = ["config.json"] + (["tokenizer.json"] if needs_tokenizer else [])
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index) as f:
                needed += sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError):
            result["empty"].append("model.safetensors.index.json (unreadable)")
    elif not any(name.endswith(".safetensors") for name in os.listdir(folder)):
        needed.append("*.safetensors")
    for name in needed:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            result["missing"].append(name)
        elif os.path.getsize(path) == 0:
            result["empty"].append(name)
    result["complete"] = result["marker"] == want and not result["missing"] and not result["empty"]
    return result


def main(argv):
    mode = argv[0] if argv[:1] in (["--seal"], ["--verify"]) else ""
    args = argv[1:] if mode else argv
    for i in range(0, len(args), 3):
        folder, want, needs_tokenizer = args[i], args[i + 1], args[i + 2] == "1"
        result = check(folder, want, needs_tokenizer)
        if not mode:
            print(json.dumps(result))
            continue
        problems = result["missing"] + [name + " (empty)" for name in result["empty"]]
        if not result["exists"] or problems:
            when = "after download" if mode == "--seal" else "for the engine"
            print(
                f"model folder {folder} is incomplete {when}: "
                f"{', '.join(problems) or 'folder missing'}",
                file=sys.stderr,
            )
            return 1
        if mode == "--verify":
            print(f"model folder {folder} has every file an engine needs")
            continue
        with open(os.path.join(folder, MARKER), "w") as f:
            f.write(want + "\n")
        print(f"model folder {folder} complete ({want})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""
The deploys, one package per capability, each holding its ``@deploy`` functions and the
``@operation``s they call: host (preflight, driver, drm override, memory, reboot), qsfp
(network profiles, proof, engine environment), models (Hugging Face, model folders) and
engine (units, sudoers, health). deploy.py lists them in the order they run.
"""

"""Entropy-aware speculative decoding (Su, Zhang and He, arXiv 2512.23765): SD, but a draft the standard test kept is
refused where both models are unsure and agree (the rule fires: easd.method.acceptance.rule_fires), and the target
chooses another token. The one difference from SD is `refuses`."""

from .sd import Speculative

EASD = Speculative(
    name="easd",
    title="EASD",
    models="TM + DM",
    origins=("draft_accepted", "target_resample", "easd_penalty", "bonus"),
    intervention_origins=("easd_penalty",),
    intervention=("penalty", "penalties"),
    refuses=True,
    follows="sd",  # the same decisions and random numbers until the first penalty: easd.method.prefix resumes SD's run
)

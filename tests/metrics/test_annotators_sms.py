"""Acceptance (issue 15, item 2): SMS Spam with three simulated annotators, imported in the long format,
answered by the tf-idf baseline; `workbench report --json` shows agreement figures equal to the
reference implementations computed from the raw CSV, and soft scores equal to scikit-learn's.

Noise (datasets/simulate_annotators.py, seed 0): each annotator copies the gold label and, with
probability 0.2, flips it to the other option. Two annotators then agree with probability
0.8² + 0.2² = 0.68 per item.
"""

from __future__ import annotations

import importlib.util
import json
from itertools import combinations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score
from sklearn.metrics import log_loss as sk_log_loss
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

import workbench as wb
from tests.conftest import ROOT, dataset_path, run_cli

# ~35 s (import 16.7k rows, a tf-idf run, three reports); the default `python -m pytest` still runs it
pytestmark = pytest.mark.slow

FLIP = 0.2
SIM = ROOT / "datasets" / "simulate_annotators.py"


def _simulator():
    spec = importlib.util.spec_from_file_location("simulate_annotators", SIM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sms(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("sms_annotators")
    frame = pd.read_csv(dataset_path("sms_spam", "sms_spam.csv"), dtype=str, keep_default_na=False)
    long = _simulator().simulate_annotators(frame, "label", n_annotators=3, flip=FLIP, seed=0)
    path = tmp / "sms_annotators.csv"
    long.to_csv(path, index=False)
    db = tmp / "wb.duckdb"
    schema = str(ROOT / "experiments" / "schemas" / "sms_spam.yaml")
    run_cli(
        "datasets", "import", str(path), "--name", "sms_annotated", "--text-column", "text", "--id-column", "id",
        "--annotator-column", "annotator", "--label", "spam=label", "--positive", "spam=spam",
        "--test-fraction", "0.3", "--calibration-fraction", "0.3", "--seed", "0", "--schema", schema,
        db=db, check=True,
    )  # fmt: skip
    run_id = run_cli(
        "run", "--dataset", "sms_annotated", "--schema", schema, "--provider", "baseline:tfidf-logreg",
        db=db, check=True,
    ).stdout.strip()  # fmt: skip
    majority = json.loads(run_cli("report", run_id, "--boot", "20", "--json", db=db, check=True).stdout)
    soft = json.loads(run_cli("report", run_id, "--boot", "20", "--labels", "soft", "--json", db=db, check=True).stdout)
    with wb.connect(db, read_only=True) as con:
        answers = wb.load_answers(con, run_id, "spam", ["test"])
    return {"long": long, "answers": answers, "majority": majority, "soft": soft}


def _test_ratings(sms: dict) -> tuple[np.ndarray, np.ndarray]:
    """(items × annotators) ratings of the test items from the CSV (0 = spam = yes, 1 = ham = no), and
    the model's top option on the same items."""
    ans = sms["answers"]
    long = sms["long"]
    wide = long.pivot(index="id", columns="annotator", values="label").loc[ans.item_ids.astype(str)]
    ratings = (wide.to_numpy() == "ham").astype(int)
    return ratings, ans.probs.argmax(axis=1)


def test_agreement_matches_the_references(sms: dict):
    ag = sms["majority"]["questions"]["spam"]["agreement"]
    ratings, model = _test_ratings(sms)
    n = len(ratings)
    assert ag["n_items"] == n == 1719 and ag["n_annotators"] == 3 and ag["votes_per_item"] == 3.0
    alpha = krippendorff.alpha(reliability_data=ratings.T, level_of_measurement="nominal")
    alpha_model = krippendorff.alpha(reliability_data=np.vstack([ratings.T, model]), level_of_measurement="nominal")
    fleiss = fleiss_kappa(aggregate_raters(ratings, n_cat=2)[0])
    fleiss_model = fleiss_kappa(aggregate_raters(np.column_stack([ratings, model]), n_cat=2)[0])
    cohen = np.mean([cohen_kappa_score(ratings[:, i], ratings[:, j]) for i, j in combinations(range(3), 2)])
    cohen_model = [cohen_kappa_score(model, ratings[:, j]) for j in range(3)]
    print(
        f"\nSMS spam, 3 simulated annotators (flip {FLIP}), {n} test items: "
        f"α {ag['annotators']['krippendorff_alpha_nominal']:.4f} (krippendorff {alpha:.4f}), "
        f"Fleiss κ {ag['annotators']['fleiss_kappa']:.4f} (statsmodels {fleiss:.4f}), "
        f"Cohen κ {ag['annotators']['cohen_kappa']:.4f} (scikit-learn {cohen:.4f}); model: "
        f"α {ag['model']['krippendorff_alpha_nominal']:.4f}, κ {ag['model']['cohen_kappa']:.4f}, "
        f"agreement with an annotator {ag['model']['pairwise_agreement']:.4f} vs "
        f"{ag['annotators']['pairwise_agreement']:.4f} between annotators"
    )
    assert ag["annotators"]["krippendorff_alpha_nominal"] == pytest.approx(alpha, abs=1e-12)
    assert ag["model"]["krippendorff_alpha_nominal"] == pytest.approx(alpha_model, abs=1e-12)
    assert ag["annotators"]["fleiss_kappa"] == pytest.approx(fleiss, abs=1e-12)
    assert ag["model"]["fleiss_kappa"] == pytest.approx(fleiss_model, abs=1e-12)
    assert ag["annotators"]["cohen_kappa"] == pytest.approx(cohen, abs=1e-12)
    assert ag["model"]["cohen_kappa"] == pytest.approx(np.mean(cohen_model), abs=1e-12)
    assert [a["cohen_kappa_model"] for a in ag["per_annotator"]] == pytest.approx(cohen_model, abs=1e-12)
    # the documented noise: two annotators agree w.p. 0.68 (± 3 standard errors of a mean over n items)
    assert ag["annotators"]["pairwise_agreement"] == pytest.approx(0.68, abs=3 * np.sqrt(0.68 * 0.32 / n))
    # the noise floor: the model, trained on majority labels, agrees with annotators more than they do
    # with each other (a model equal to gold would agree w.p. 0.8)
    assert ag["model"]["pairwise_agreement"] > ag["annotators"]["pairwise_agreement"]


def test_soft_scores_match_sklearn_on_the_expanded_votes(sms: dict):
    ratings, _ = _test_ratings(sms)
    probs = sms["answers"].probs
    n = len(ratings)
    p_rep = np.repeat(probs, 3, axis=0)
    y_rep = ratings.ravel()
    soft = sms["soft"]["questions"]["spam"]["metrics"]
    assert sms["soft"]["questions"]["spam"]["counts"]["n_votes"] == 3 * n
    assert soft["soft_log_loss"]["estimate"] == pytest.approx(sk_log_loss(y_rep, p_rep, labels=[0, 1]), rel=1e-9)
    brier = np.mean((p_rep[:, 0] - (y_rep == 0)) ** 2)  # yes/no Brier on P(yes), as the hard report
    assert soft["soft_brier"]["estimate"] == pytest.approx(brier, rel=1e-9)
    share = (ratings == probs.argmax(axis=1)[:, None]).mean(axis=1)
    assert soft["soft_accuracy"]["estimate"] == pytest.approx(share.mean(), rel=1e-12)
    # majority vote of three noisy annotators is the gold label w.p. 0.8³ + 3·0.8²·0.2 = 0.896, so the
    # majority report scores against cleaner labels than the soft one
    hard = sms["majority"]["questions"]["spam"]["metrics"]
    assert hard["accuracy"]["estimate"] > soft["soft_accuracy"]["estimate"]
    assert soft["soft_log_loss"]["estimate"] > soft["soft_log_loss_floor"]["estimate"]

"""The downstream classifiers (``fairpca.tasks.classify``): the paper's regularisation."""

from __future__ import annotations

import pytest

from fairpca.tasks.classify import make_classifier


def test_classifier_regularization_follows_appendix_c1():
    assert pytest.approx(1 / (2 * 5000 * 0.01)) == make_classifier("logreg", 5000, 0).C
    assert pytest.approx(1 / (2 * 5000 * 0.00005)) == make_classifier("rbf_svc", 5000, 0).C
    assert make_classifier("mlp", 10, 0).hidden_layer_sizes == (10, 5)
    with pytest.raises(ValueError, match="unknown classifier"):
        make_classifier("tree", 10, 0)

"""Datasets: list, counts per split and label, fingerprint and versions, sample items, import."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import state

st.title("Datasets")


def _import_form(path: str) -> None:
    """Upload a file and import it with the same function as `workbench datasets import`."""
    with st.expander("Import a dataset", expanded=False):
        with st.form("import_dataset", clear_on_submit=False):
            upload = st.file_uploader(
                "File (CSV, TSV, Parquet, JSON, JSONL)",
                type=["csv", "tsv", "parquet", "json", "jsonl"],
                key="import_file",
            )
            c1, c2 = st.columns(2)
            name = c1.text_input("Name", key="import_name")
            text_column = c2.text_input("Text column", value="text", key="import_text_column")
            labels = c1.text_input(
                "Labels (QUESTION=COLUMN, comma-separated)", value="intent=category", key="import_labels"
            )
            split_column = c2.text_input("Split column (optional)", key="import_split_column")
            test_fraction = c1.number_input(
                "Test fraction (when no split column)", 0.0, 0.9, 0.0, 0.05, key="import_test_fraction"
            )
            calibration_fraction = c2.number_input(
                "Calibration fraction (carved from train)", 0.0, 0.9, 0.2, 0.05, key="import_calibration_fraction"
            )
            submitted = st.form_submit_button("Import")
        if not submitted:
            return
        from workbench.store.datasets import import_dataset
        from workbench.store.db import connect
        from workbench.store.import_spec import ImportSpec

        if upload is None:
            st.error("Choose a file to import.")
            return
        pairs = dict(p.split("=", 1) for p in labels.split(",") if "=" in p)
        spec = ImportSpec(
            name=name.strip(),
            text_column=text_column or None,
            labels={k.strip(): v.strip() for k, v in pairs.items()},
            split_column=split_column or None,
            test_fraction=test_fraction or None,
            calibration_fraction=calibration_fraction or None,
        )
        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / Path(upload.name).name
            file.write_bytes(upload.getvalue())
            try:
                con = connect(path)  # a short write: the only write the Datasets page makes
                try:
                    info = import_dataset(con, [file], spec)
                finally:
                    con.close()
            except WorkbenchError as exc:
                state.show_error(exc)
                return
        st.success(
            f"{'Imported' if info.created else 'Unchanged'} {info.name} v{info.version}: "
            f"{info.n_items} items, fingerprint {info.fingerprint[:12]}"
        )


if state.store_ready():
    path, token, frame = state.current_table(
        state.datasets_frame, "No dataset in this store yet: import one below, or run `workbench demo`."
    )
    if not frame.empty:
        shown = frame.assign(
            questions=frame["questions"].map(lambda q: ", ".join(q)), fingerprint=frame["fingerprint"].str[:12]
        )
        st.dataframe(shown, hide_index=True, width="stretch", key="datasets_table")
        names = frame["name"].tolist()
        if state.KEY_DATASET in st.session_state and st.session_state[state.KEY_DATASET] not in names:
            del st.session_state[state.KEY_DATASET]
        name = st.selectbox("Dataset", names, key=state.KEY_DATASET)
        latest = int(frame.loc[frame["name"] == name, "version"].iloc[0])
        version = st.selectbox("Version", list(range(latest, 0, -1)), key="dataset_version")
        info = state.dataset_info(path, token, name, int(version))

        c = st.columns(4)
        c[0].metric("Items", f"{info['n_items']:,}")
        for i, split in enumerate(("train", "calibration", "test")):
            c[i + 1].metric(split.capitalize(), f"{info['splits'].get(split, 0):,}")
        st.markdown(
            f"**Fingerprint** `{info['fingerprint']}`  ·  **questions** "
            f"{', '.join(info['questions'])}  ·  split seed {info['params'].get('seed', '—')}"
        )
        st.subheader("Versions")
        st.dataframe(pd.DataFrame(info["versions"]), hide_index=True, width="stretch")

        st.subheader("Labels")
        q = st.selectbox("Question", info["questions"], key="dataset_question")
        counts = info["labels"][q]["label_counts"]
        label_frame = pd.DataFrame({"label": list(counts), "items": list(counts.values())}).sort_values(
            "items", ascending=True
        )
        per_split = info["labels"][q]["labelled_items_per_split"] or {}
        st.caption(
            f"{info['labels'][q]['n_labels']} labels; labelled items per split: "
            + (", ".join(f"{s_} {int(n_):,}" for s_, n_ in per_split.items()) or "none")
        )
        # one horizontal bar per label, tall enough that every label name stays readable
        bars = px.bar(
            label_frame,
            x="items",
            y="label",
            orientation="h",
            text="items",
            height=max(260, 22 * len(label_frame) + 110),
        )
        bars.update_layout(
            title={"text": f"Labelled items per label of {q}", "x": 0, "xanchor": "left"},
            yaxis={"title": None, "automargin": True, "tickfont": {"size": 12}, "dtick": 1},
            xaxis_title="labelled items",
            margin={"t": 50, "l": 10, "r": 30},
        )
        bars.update_traces(textposition="outside", cliponaxis=False)
        st.plotly_chart(bars, key="label_counts_chart")

        st.subheader("Sample items")
        split = st.selectbox("Split", ["(all)", "train", "calibration", "test"], key="dataset_sample_split")
        n = st.slider("Rows", 5, 200, 20, key="dataset_sample_rows")
        st.dataframe(
            state.sample_items(path, token, name, int(version), None if split == "(all)" else split, n),
            hide_index=True,
            width="stretch",
        )
    _import_form(path)

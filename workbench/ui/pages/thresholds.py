"""Thresholds (being built)."""
import streamlit as st

st.title("Thresholds")
st.info("This page is being built.")

"""Calibration (being built)."""
import streamlit as st

st.title("Calibration")
st.info("This page is being built.")

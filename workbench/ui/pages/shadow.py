"""Shadow (being built)."""
import streamlit as st

st.title("Shadow")
st.info("This page is being built.")

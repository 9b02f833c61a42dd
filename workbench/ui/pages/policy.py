"""Policy (being built)."""
import streamlit as st

st.title("Policy")
st.info("This page is being built.")

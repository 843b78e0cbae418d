//! reports — incident model, durable store, retention and rendering (being built).

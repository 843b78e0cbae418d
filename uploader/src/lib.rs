//! uploader — chunk planner, `Driver` trait with CUDA and host backends, strategies (being built).

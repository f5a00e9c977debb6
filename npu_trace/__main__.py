from npu_trace.cli import main

raise SystemExit(main())

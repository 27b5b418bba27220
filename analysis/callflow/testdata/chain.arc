arc of /tmp/cf2-it/swtrace.nrm2: one line per taken branch (and system call, signal) of the traced threads
CPU K/U TYPE INSTS  CALLFLOW / PID_TID          OFFSET  SYMBOL:MODULE  PID_TID_NAME  TYPE-WORD  LINE
  0 U 1      5   25641_25712 0x7e start_thread:ref 25641_25712_ref CALL callflow_exact.c:131
  0 U 1      2       25641_25641 0x20 work:ref 25641_25641_ref CALL callflow_exact.c:96
  0 U 1      1        25641_25641 0x0 chain1:ref 25641_25641_ref CALL callflow_exact.c:54
  0 U 1      1         25641_25641 0x0 chain2:ref 25641_25641_ref CALL callflow_exact.c:49
  0 U 1      1          25641_25641 0x0 chain3:ref 25641_25641_ref CALL callflow_exact.c:44
  0 U 1      1           25641_25641 0x0 chain4:ref 25641_25641_ref CALL callflow_exact.c:39
  0 U 2      4          25641_25641 0x12 leaf:ref 25641_25641_ref RETURN callflow_exact.c:35
  0 U 2      1         25641_25641 0x5 chain4:ref 25641_25641_ref RETURN callflow_exact.c:40
  0 U 2      1        25641_25641 0x5 chain3:ref 25641_25641_ref RETURN callflow_exact.c:45
  0 U 2      1       25641_25641 0x5 chain2:ref 25641_25641_ref RETURN callflow_exact.c:50
  0 U 2      1      25641_25641 0x5 chain1:ref 25641_25641_ref RETURN callflow_exact.c:55
  0 U 3      2      25641_25641 0x28 work:ref 25641_25641_ref JUMP callflow_exact.c:95
  0 U 1      1       25641_25641 0x20 work:ref 25641_25641_ref CALL callflow_exact.c:96
  0 U 1      1        25641_25641 0x0 chain1:ref 25641_25641_ref CALL callflow_exact.c:54
  0 U 1      1         25641_25641 0x0 chain2:ref 25641_25641_ref CALL callflow_exact.c:49
  0 U 1      1          25641_25641 0x0 chain3:ref 25641_25641_ref CALL callflow_exact.c:44
  0 U 1      1           25641_25641 0x0 chain4:ref 25641_25641_ref CALL callflow_exact.c:39
  0 U 2      4          25641_25641 0x12 leaf:ref 25641_25641_ref RETURN callflow_exact.c:35
  0 U 2      1         25641_25641 0x5 chain4:ref 25641_25641_ref RETURN callflow_exact.c:40
  0 U 2      1        25641_25641 0x5 chain3:ref 25641_25641_ref RETURN callflow_exact.c:45
  0 U 2      1       25641_25641 0x5 chain2:ref 25641_25641_ref RETURN callflow_exact.c:50
  0 U 2      1      25641_25641 0x5 chain1:ref 25641_25641_ref RETURN callflow_exact.c:55
  0 U 2     16  25641_25712 0x4f __ctype_init:ref 25641_25712_ref RETURN callflow_exact.c:131
  0 U 3      2      25641_25641 0x28 work:ref 25641_25641_ref JUMP callflow_exact.c:95
